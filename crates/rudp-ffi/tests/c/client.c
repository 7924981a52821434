/*
 * A C client of a Rust keel-rudp server, run by the harness
 * examples/c_peers.rs (scripts/test.sh): connects with a connect token
 * through keel's link conditioner, sends 100 reliable-ordered and 100
 * unreliable messages, checks the echoes (reliable: every one, once, in
 * order; unreliable: no duplicates, no corruption; 400 bytes each),
 * sends "done", and
 * expects the server's close (code 4242, "game over"). Prints its stats.
 *
 * Usage: client SERVER_ADDR TOKEN_TEXT MIN_RTT_US
 * Exit: 0 all checks passed; 1 a check failed (the message says which).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "keel_rudp.h"

#define N 100
#define RELIABLE 0
#define UNRELIABLE 1
/* A game tick's input: the exchange takes dozens of packets. */
#define SIZE 400

static int fail(const char *what, int rc) {
  fprintf(stderr, "client.c: FAILED: %s (%d: %s)\n", what, rc, keel_error_message(rc));
  return 1;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: client SERVER_ADDR TOKEN_TEXT MIN_RTT_US\n");
    return 2;
  }
  const unsigned long long min_rtt = strtoull(argv[3], NULL, 10);
  uint32_t channels[2] = {KEEL_CHANNEL_RELIABLE_ORDERED, KEEL_CHANNEL_UNRELIABLE};
  keel_config cfg = {channels, 2};
  keel_client *c = NULL;
  int rc = keel_client_connect_token(&cfg, argv[1], argv[2], &c);
  if (rc != KEEL_OK) return fail("connect with the token", rc);

  int next_reliable = 0, unreliable = 0, connected = 0, sent_done = 0;
  unsigned char seen[N] = {0};
  const double start = now_s();
  keel_event ev;
  for (;;) {
    if (now_s() - start > 15) {
      fprintf(stderr, "client.c: FAILED: not done in 15 s (reliable %d, unreliable %d)\n",
              next_reliable, unreliable);
      return 1;
    }
    rc = keel_client_poll(c, 5, &ev);
    if (rc < 0) return fail("poll", rc);
    if (rc == 0) continue;
    if (ev.kind == KEEL_EVENT_CONNECTED) {
      connected = 1;
      printf("client.c: connected after %.1f ms\n", (now_s() - start) * 1e3);
      char msg[SIZE];
      for (int i = 0; i < N; i++) {
        /* "r17" then NUL padding to SIZE bytes: the echo is checked whole. */
        memset(msg, 0, sizeof msg);
        snprintf(msg, 32, "r%d", i);
        rc = keel_client_send(c, RELIABLE, (const uint8_t *)msg, SIZE);
        if (rc != KEEL_OK) return fail("send reliable", rc);
        memset(msg, 0, sizeof msg);
        snprintf(msg, 32, "u%d", i);
        rc = keel_client_send(c, UNRELIABLE, (const uint8_t *)msg, SIZE);
        if (rc != KEEL_OK) return fail("send unreliable", rc);
      }
    } else if (ev.kind == KEEL_EVENT_MESSAGE) {
      char text[SIZE + 1] = {0};
      if (ev.len != SIZE) return fail("echo length", (int)ev.len);
      memcpy(text, ev.data, ev.len);
      for (size_t k = strlen(text); k < SIZE; k++) {
        if (text[k] != 0) return fail("echo padding corrupted", (int)k);
      }
      if (ev.channel == RELIABLE) {
        char want[32];
        snprintf(want, sizeof want, "r%d", next_reliable);
        if (strcmp(text, want) != 0) {
          fprintf(stderr, "client.c: FAILED: reliable echo \"%s\", wanted \"%s\"\n", text, want);
          return 1;
        }
        next_reliable++;
      } else if (ev.channel == UNRELIABLE) {
        int i = atoi(text + 1);
        if (text[0] != 'u' || i < 0 || i >= N || seen[i]) {
          fprintf(stderr, "client.c: FAILED: unreliable echo \"%s\" (bad or twice)\n", text);
          return 1;
        }
        seen[i] = 1;
        unreliable++;
      } else {
        return fail("echo on an unknown channel", (int)ev.channel);
      }
      if (next_reliable == N && !sent_done) {
        rc = keel_client_send(c, RELIABLE, (const uint8_t *)"done", 4);
        if (rc != KEEL_OK) return fail("send done", rc);
        sent_done = 1;
      }
    } else if (ev.kind == KEEL_EVENT_DISCONNECTED) {
      if (!connected || !sent_done) {
        fprintf(stderr, "client.c: FAILED: disconnected early (kind %u, code %llu, \"%s\")\n",
                ev.disconnect, (unsigned long long)ev.code, ev.reason);
        return 1;
      }
      if (ev.disconnect != KEEL_DISCONNECT_REMOTE || ev.code != 4242 ||
          strcmp(ev.reason, "game over") != 0 || ev.reason_len != 9) {
        fprintf(stderr, "client.c: FAILED: close kind %u code %llu reason \"%s\"\n",
                ev.disconnect, (unsigned long long)ev.code, ev.reason);
        return 1;
      }
      break;
    }
  }
  keel_connection_stats st;
  rc = keel_client_get_stats(c, &st, sizeof st);
  if (rc != KEEL_OK) return fail("stats", rc);
  printf("client.c: reliable %d/%d in order, unreliable %d/%d; rtt %llu us (min %llu), "
         "%llu packets sent, %llu lost (%.1f %%), %llu resent, %llu B sent, %llu B received\n",
         next_reliable, N, unreliable, N, (unsigned long long)st.rtt_us,
         (unsigned long long)st.rtt_min_us, (unsigned long long)st.packets_sent,
         (unsigned long long)st.packets_lost, st.loss_rate * 100,
         (unsigned long long)st.retransmissions, (unsigned long long)st.bytes_sent,
         (unsigned long long)st.bytes_received);
  if (st.rtt_min_us < min_rtt) {
    fprintf(stderr, "client.c: FAILED: min rtt %llu us under the link's %llu\n",
            (unsigned long long)st.rtt_min_us, min_rtt);
    return 1;
  }
  if (unreliable == 0) {
    fprintf(stderr, "client.c: FAILED: no unreliable echo arrived\n");
    return 1;
  }
  keel_client_destroy(c);
  printf("client.c: all passed in %.0f ms\n", (now_s() - start) * 1e3);
  return 0;
}
