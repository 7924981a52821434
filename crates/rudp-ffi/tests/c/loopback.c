/* A server and a client of the keel-rudp C API in one process, over
 * loopback, insecure mode: the client connects and sends a reliable
 * message, the server echoes it, the client receives it, the server closes
 * the connection with a code and reason, and the client sees both. Prints
 * each step; exits 1 on any failure, and gives up after 5 s.
 * Built and run by scripts/test.sh against the static library. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c99 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "keel_rudp.h"

#define CLOSE_CODE 4242
#define CLOSE_REASON "server shutting down"
#define MESSAGE "hello from C"

static int failures = 0;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "loopback.c:%d: FAILED: %s: ", __LINE__, #cond);        \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
      failures++;                                                              \
      goto done;                                                               \
    }                                                                          \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(void) {
  uint32_t channels[2] = {KEEL_CHANNEL_RELIABLE_ORDERED, KEEL_CHANNEL_UNRELIABLE};
  keel_config cfg = {channels, 2};
  keel_server *server = NULL;
  keel_client *client = NULL;
  keel_event ev;
  char addr[64];
  int rc;
  uint64_t conn = 0;
  int server_connected = 0, client_connected = 0, echoed = 0, got_echo = 0;
  int closing = 0, client_closed = 0, server_closed = 0;
  double start = now_s();

  /* Errors are codes with static messages. */
  CHECK(strcmp(keel_error_message(KEEL_OK), "ok") == 0, "%s", keel_error_message(KEEL_OK));
  CHECK(keel_client_connect_insecure(NULL, "127.0.0.1:1", &client) == KEEL_ERR_NULL, "NULL config");
  CHECK(keel_client_connect_insecure(&cfg, "not an address", &client) == KEEL_ERR_ADDRESS,
        "bad address");
  {
    uint32_t bad = 99;
    keel_config bad_cfg = {&bad, 1};
    CHECK(keel_server_create_insecure(&bad_cfg, "127.0.0.1:0", &server) ==
              KEEL_ERR_INVALID_ARGUMENT,
          "unknown channel kind");
  }
  CHECK(client == NULL && server == NULL, "no handle on error");
  printf("error codes: ok (e.g. %d: %s)\n", KEEL_ERR_ADDRESS,
         keel_error_message(KEEL_ERR_ADDRESS));

  rc = keel_server_create_insecure(&cfg, "127.0.0.1:0", &server);
  CHECK(rc == KEEL_OK, "server create: %s", keel_error_message(rc));
  rc = keel_server_local_addr(server, addr, sizeof addr);
  CHECK(rc == KEEL_OK, "local addr: %s", keel_error_message(rc));
  printf("server bound to %s\n", addr);
  rc = keel_client_connect_insecure(&cfg, addr, &client);
  CHECK(rc == KEEL_OK, "client connect: %s", keel_error_message(rc));

  while (!(client_closed && server_closed)) {
    CHECK(now_s() - start < 5.0, "gave up after 5 s (connected %d/%d, echoed %d, got %d)",
          server_connected, client_connected, echoed, got_echo);

    while ((rc = keel_server_poll(server, 0, &ev)) == 1) {
      switch (ev.kind) {
      case KEEL_EVENT_CONNECTED:
        CHECK(ev.connection != 0, "connection handle 0");
        conn = ev.connection;
        server_connected = 1;
        printf("server: connection %llu connected\n", (unsigned long long)conn);
        break;
      case KEEL_EVENT_MESSAGE:
        CHECK(ev.connection == conn, "message from unknown connection");
        printf("server: %zu bytes on channel %u, echoing\n", ev.len, ev.channel);
        rc = keel_server_send(server, ev.connection, (uint8_t)ev.channel, ev.data, ev.len);
        CHECK(rc == KEEL_OK, "server send: %s", keel_error_message(rc));
        echoed = 1;
        break;
      case KEEL_EVENT_DISCONNECTED:
        CHECK(ev.disconnect == KEEL_DISCONNECT_LOCAL, "server disconnect kind %u", ev.disconnect);
        CHECK(ev.code == CLOSE_CODE, "server close code %llu", (unsigned long long)ev.code);
        printf("server: connection %llu ended (local close, code %llu, \"%s\")\n",
               (unsigned long long)ev.connection, (unsigned long long)ev.code, ev.reason);
        server_closed = 1;
        break;
      default:
        CHECK(0, "unexpected server event %u", ev.kind);
      }
    }
    CHECK(rc == 0, "server poll: %s", keel_error_message(rc));

    while (!client_closed && (rc = keel_client_poll(client, 1, &ev)) == 1) {
      switch (ev.kind) {
      case KEEL_EVENT_CONNECTED:
        client_connected = 1;
        printf("client: connected, sending \"%s\" on channel 0\n", MESSAGE);
        rc = keel_client_send(client, 0, (const uint8_t *)MESSAGE, strlen(MESSAGE));
        CHECK(rc == KEEL_OK, "client send: %s", keel_error_message(rc));
        rc = keel_client_send(client, 7, (const uint8_t *)MESSAGE, 1);
        CHECK(rc == KEEL_ERR_UNKNOWN_CHANNEL, "send on channel 7: %d", rc);
        break;
      case KEEL_EVENT_MESSAGE:
        CHECK(ev.channel == 0, "echo on channel %u", ev.channel);
        CHECK(ev.len == strlen(MESSAGE) && memcmp(ev.data, MESSAGE, ev.len) == 0,
              "echo differs (%zu bytes)", ev.len);
        printf("client: echo received (%zu bytes): \"%.*s\"\n", ev.len, (int)ev.len,
               (const char *)ev.data);
        got_echo = 1;
        break;
      case KEEL_EVENT_DISCONNECTED:
        CHECK(got_echo, "disconnected before the echo");
        CHECK(ev.disconnect == KEEL_DISCONNECT_REMOTE, "client disconnect kind %u",
              ev.disconnect);
        CHECK(ev.code == CLOSE_CODE, "client close code %llu", (unsigned long long)ev.code);
        CHECK(ev.reason_len == strlen(CLOSE_REASON) && strcmp(ev.reason, CLOSE_REASON) == 0,
              "client close reason \"%s\"", ev.reason);
        printf("client: disconnected by the server, code %llu, reason \"%s\"\n",
               (unsigned long long)ev.code, ev.reason);
        client_closed = 1;
        break;
      default:
        CHECK(0, "unexpected client event %u", ev.kind);
      }
    }
    CHECK(rc >= 0, "client poll: %s", keel_error_message(rc));

    if (got_echo && !closing) {
      rc = keel_server_close(server, conn, CLOSE_CODE, CLOSE_REASON);
      CHECK(rc == KEEL_OK, "server close: %s", keel_error_message(rc));
      printf("server: closing connection %llu (code %d, \"%s\")\n", (unsigned long long)conn,
             CLOSE_CODE, CLOSE_REASON);
      closing = 1;
    }
  }
  CHECK(keel_server_send(server, conn, 0, (const uint8_t *)"x", 1) == KEEL_ERR_UNKNOWN_CONNECTION ||
            keel_server_send(server, conn, 0, (const uint8_t *)"x", 1) == KEEL_ERR_CLOSED,
        "send after close");

done:
  keel_client_destroy(client);
  keel_server_destroy(server);
  if (failures) {
    fprintf(stderr, "loopback.c: FAILED\n");
    return 1;
  }
  printf("loopback.c: all passed in %.0f ms\n", (now_s() - start) * 1000.0);
  return 0;
}
