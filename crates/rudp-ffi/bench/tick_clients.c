/*
 * The C side of the C API's benchmark (scripts/c-api-bench.py): CLIENTS
 * keel-rudp clients through the C API, driven as a game drives them: a
 * 60 Hz frame loop that polls every client with timeout 0, sends each a
 * 400-byte reliable message per frame once connected, and sleeps until
 * the next frame. Its Rust twin is examples/tick_bench.rs (`rust`).
 *
 * Usage: tick_clients ADDR CLIENTS SECONDS; prints one JSON line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "keel_rudp.h"

#define SIZE 400
#define MAX_CLIENTS 1024
#define TICK_NS 16666667LL

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: tick_clients ADDR CLIENTS SECONDS\n");
    return 2;
  }
  int n = atoi(argv[2]);
  long long secs = atoll(argv[3]);
  if (n < 1 || n > MAX_CLIENTS || secs < 1) {
    fprintf(stderr, "tick_clients: CLIENTS 1 to %d, SECONDS at least 1\n", MAX_CLIENTS);
    return 2;
  }
  uint32_t channels[1] = {KEEL_CHANNEL_RELIABLE_ORDERED};
  keel_config cfg = {channels, 1};
  static keel_client *c[MAX_CLIENTS];
  static int connected[MAX_CLIENTS];
  for (int i = 0; i < n; i++) {
    int rc = keel_client_connect_insecure(&cfg, argv[1], &c[i]);
    if (rc != KEEL_OK) {
      fprintf(stderr, "tick_clients: connect: %s\n", keel_error_message(rc));
      return 1;
    }
  }
  uint8_t msg[SIZE];
  for (int i = 0; i < SIZE; i++) msg[i] = (uint8_t)i;
  unsigned long long sent = 0, echoed = 0;
  const long long start = now_ns(), end = start + secs * 1000000000LL;
  /* After the last send, a few frames more for the last echoes. */
  const long long stop = end + 200000000LL;
  long long frame = start;
  keel_event ev;
  while (frame < stop) {
    for (int i = 0; i < n; i++) {
      int rc;
      while ((rc = keel_client_poll(c[i], 0, &ev)) == 1) {
        if (ev.kind == KEEL_EVENT_CONNECTED) connected[i] = 1;
        else if (ev.kind == KEEL_EVENT_MESSAGE && ev.len == SIZE) echoed++;
      }
      if (rc < 0) {
        fprintf(stderr, "tick_clients: poll: %s\n", keel_error_message(rc));
        return 1;
      }
      if (connected[i] && frame < end && keel_client_send(c[i], 0, msg, SIZE) == KEEL_OK) {
        sent++;
        /* Out now, not at the next frame's poll. */
        keel_client_poll(c[i], 0, &ev);
        if (ev.kind == KEEL_EVENT_MESSAGE && ev.len == SIZE) echoed++;
        else if (ev.kind == KEEL_EVENT_CONNECTED) connected[i] = 1;
      }
    }
    frame += TICK_NS;
    long long wait = frame - now_ns();
    if (wait > 0) {
      struct timespec ts = {(time_t)(wait / 1000000000LL), (long)(wait % 1000000000LL)};
      nanosleep(&ts, NULL);
    }
  }
  for (int i = 0; i < n; i++) keel_client_destroy(c[i]);
  printf("{\"client\":\"c\",\"clients\":%d,\"seconds\":%lld,\"sent\":%llu,\"echoed\":%llu}\n", n,
         secs, sent, echoed);
  return 0;
}
