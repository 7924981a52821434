/*
 * A C server for a Rust keel-rudp client, run by the harness
 * examples/c_peers.rs (scripts/test.sh): requires connect tokens sealed
 * with KEY, broadcasts "welcome" to each new connection's lobby (all
 * connected), echoes every message on its channel, and on "stop" stops
 * the server with KEEL_CLOSE_STOPPED and "c server stopping", polling
 * until STOPPED. Prints "listening ADDR" first (the harness mints the
 * token for it), then its stats.
 *
 * Usage: server BIND_ADDR KEY_HEX
 * Exit: 0 stopped as expected; 1 a check failed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "keel_rudp.h"

static int fail(const char *what, int rc) {
  fprintf(stderr, "server.c: FAILED: %s (%d: %s)\n", what, rc, keel_error_message(rc));
  return 1;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int parse_key(const char *hex, uint8_t key[32]) {
  if (strlen(hex) != 64) return -1;
  for (int i = 0; i < 32; i++) {
    unsigned v;
    if (sscanf(hex + 2 * i, "%2x", &v) != 1) return -1;
    key[i] = (uint8_t)v;
  }
  return 0;
}

int main(int argc, char **argv) {
  uint8_t key[32];
  if (argc != 3 || parse_key(argv[2], key) != 0) {
    fprintf(stderr, "usage: server BIND_ADDR KEY_HEX (64 hex digits)\n");
    return 2;
  }
  uint32_t channels[2] = {KEEL_CHANNEL_RELIABLE_ORDERED, KEEL_CHANNEL_UNRELIABLE};
  keel_config cfg = {channels, 2};
  keel_server *s = NULL;
  int rc = keel_server_create_token(&cfg, argv[1], key, &s);
  if (rc != KEEL_OK) return fail("create", rc);
  char addr[64];
  rc = keel_server_local_addr(s, addr, sizeof addr);
  if (rc != KEEL_OK) return fail("local_addr", rc);
  printf("listening %s\n", addr);
  fflush(stdout);

  const double start = now_s();
  unsigned long long echoed = 0, disconnected = 0, connected = 0;
  int stopping = 0;
  keel_event ev;
  for (;;) {
    if (now_s() - start > 15) {
      fprintf(stderr, "server.c: FAILED: not stopped in 15 s\n");
      return 1;
    }
    rc = keel_server_poll(s, 5, &ev);
    if (rc < 0) return fail("poll", rc);
    if (rc == 0) continue;
    if (ev.kind == KEEL_EVENT_CONNECTED) {
      connected++;
      uint32_t state = 99;
      rc = keel_server_connection_state(s, ev.connection, &state);
      if (rc != KEEL_OK || state != KEEL_STATE_CONNECTED) return fail("state after CONNECTED", rc);
      size_t queued = 0;
      rc = keel_server_broadcast(s, 0, (const uint8_t *)"welcome", 7, &queued);
      if (rc != KEEL_OK || queued != connected) return fail("broadcast", rc);
    } else if (ev.kind == KEEL_EVENT_MESSAGE) {
      if (ev.len == 4 && memcmp(ev.data, "stop", 4) == 0) {
        rc = keel_server_stop(s, KEEL_CLOSE_STOPPED, "c server stopping");
        if (rc != KEEL_OK) return fail("stop", rc);
        stopping = 1;
        continue;
      }
      rc = keel_server_send(s, ev.connection, (uint8_t)ev.channel, ev.data, ev.len);
      if (rc != KEEL_OK) return fail("echo", rc);
      echoed++;
    } else if (ev.kind == KEEL_EVENT_DISCONNECTED) {
      disconnected++;
      if (!stopping || ev.disconnect != KEEL_DISCONNECT_LOCAL || ev.code != KEEL_CLOSE_STOPPED) {
        fprintf(stderr, "server.c: FAILED: disconnect kind %u code %llu \"%s\" (stopping %d)\n",
                ev.disconnect, (unsigned long long)ev.code, ev.reason, stopping);
        return 1;
      }
    } else if (ev.kind == KEEL_EVENT_STOPPED) {
      break;
    }
  }
  keel_server_stats st;
  rc = keel_server_get_stats(s, &st, sizeof st);
  if (rc != KEEL_OK) return fail("stats", rc);
  printf("server.c: %llu connected, %llu echoed, %llu disconnected; stats: %llu created, "
         "%llu removed, %llu hellos, %llu refused\n",
         connected, echoed, disconnected, (unsigned long long)st.connections_created,
         (unsigned long long)st.connections_removed, (unsigned long long)st.hellos,
         (unsigned long long)st.handshakes_refused);
  if (connected != 1 || disconnected != 1 || st.connections != 0 || st.connections_created != 1) {
    fprintf(stderr, "server.c: FAILED: counts\n");
    return 1;
  }
  keel_server_destroy(s);
  printf("server.c: all passed in %.0f ms\n", (now_s() - start) * 1e3);
  return 0;
}
