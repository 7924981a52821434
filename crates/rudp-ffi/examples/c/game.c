/*
 * A complete game server and client on the keel-rudp C API, in one file.
 *
 *   game server BIND_ADDR [KEY_HEX]          Ctrl-C stops it
 *   game client SERVER_ADDR [TOKEN_TEXT] [SECONDS]
 *
 * Without KEY_HEX / TOKEN_TEXT both run insecure (LAN and tests only).
 * With them the server requires connect tokens sealed with the 32-byte key
 * (64 hex digits) and the client connects with a token from the game's
 * backend (keel-rudp's mint_token example prints one).
 *
 * Channel 0 is reliable-ordered (chat), channel 1 unreliable (inputs, 60
 * a second). The server relays every chat line to every player
 * (broadcast) and counts inputs; the client sends one chat line, then
 * inputs each frame, prints its RTT and loss each second, and after
 * SECONDS (default 5) closes with a reason and waits for the close to be
 * acknowledged.
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "keel_rudp.h"

enum { CHAT = 0, INPUT = 1 };
static const uint32_t CHANNELS[2] = {KEEL_CHANNEL_RELIABLE_ORDERED, KEEL_CHANNEL_UNRELIABLE};
static const keel_config CONFIG = {CHANNELS, 2};
static volatile sig_atomic_t interrupted = 0;

static void on_sigint(int sig) {
  (void)sig;
  interrupted = 1;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sleep_until(double t) {
  double d = t - now_s();
  if (d > 0) {
    struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
    nanosleep(&ts, NULL);
  }
}

static int check(int rc, const char *what) {
  if (rc < 0) fprintf(stderr, "game: %s: %s\n", what, keel_error_message(rc));
  return rc < 0;
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

static int server(const char *addr, const char *key_hex) {
  keel_server *s = NULL;
  uint8_t key[32];
  if (key_hex) {
    if (parse_key(key_hex, key) != 0) {
      fprintf(stderr, "game: KEY_HEX: expected 64 hex digits\n");
      return 2;
    }
    if (check(keel_server_create_token(&CONFIG, addr, key, &s), "create")) return 1;
  } else if (check(keel_server_create_insecure(&CONFIG, addr, &s), "create")) {
    return 1;
  }
  char bound[64];
  keel_server_local_addr(s, bound, sizeof bound);
  printf("server: listening on %s (%s); Ctrl-C stops it\n", bound, key_hex ? "tokens" : "insecure");
  fflush(stdout);
  signal(SIGINT, on_sigint);

  unsigned long long inputs = 0;
  keel_event ev;
  for (;;) {
    if (interrupted == 1) {
      interrupted = 2;
      printf("server: stopping, %zu players\n", keel_server_connection_count(s));
      keel_server_stop(s, KEEL_CLOSE_STOPPED, "server shutting down");
    }
    /* A dedicated server blocks up to 10 ms for the next event. */
    int rc = keel_server_poll(s, 10, &ev);
    if (check(rc, "poll")) break;
    if (rc == 0) continue;
    if (ev.kind == KEEL_EVENT_CONNECTED) {
      printf("server: player %llx joined (%zu now)\n", (unsigned long long)ev.connection,
             keel_server_connection_count(s));
    } else if (ev.kind == KEEL_EVENT_MESSAGE && ev.channel == CHAT) {
      size_t players = 0;
      /* ev.data is valid until the next poll: broadcast copies it now. */
      if (check(keel_server_broadcast(s, CHAT, ev.data, ev.len, &players), "broadcast")) break;
      printf("server: chat from %llx (%zu bytes) relayed to %zu players\n",
             (unsigned long long)ev.connection, ev.len, players);
    } else if (ev.kind == KEEL_EVENT_MESSAGE) {
      inputs++;
    } else if (ev.kind == KEEL_EVENT_DISCONNECTED) {
      printf("server: player %llx left (code %llu, \"%s\")\n", (unsigned long long)ev.connection,
             (unsigned long long)ev.code, ev.reason);
    } else if (ev.kind == KEEL_EVENT_STOPPED) {
      break;
    }
  }
  keel_server_stats st;
  keel_server_get_stats(s, &st, sizeof st);
  printf("server: stopped; %llu inputs, %llu players in all, %llu handshakes refused\n", inputs,
         (unsigned long long)st.connections_created, (unsigned long long)st.handshakes_refused);
  keel_server_destroy(s);
  return 0;
}

static int client(const char *addr, const char *token, double seconds) {
  keel_client *c = NULL;
  int rc = token ? keel_client_connect_token(&CONFIG, addr, token, &c)
                 : keel_client_connect_insecure(&CONFIG, addr, &c);
  if (check(rc, "connect")) return 1;
  signal(SIGINT, on_sigint);

  const double frame = 1.0 / 60;
  double next = now_s(), started = 0, report = 0;
  int connected = 0, closing = 0, done = 0;
  unsigned int tick = 0;
  keel_event ev;
  while (!done) {
    /* Each frame: every event that is there, without waiting. */
    while ((rc = keel_client_poll(c, 0, &ev)) == 1) {
      if (ev.kind == KEEL_EVENT_CONNECTED) {
        connected = 1;
        started = report = now_s();
        printf("client: connected\n");
        const char *hello = "hello from C";
        check(keel_client_send(c, CHAT, (const uint8_t *)hello, strlen(hello)), "chat");
      } else if (ev.kind == KEEL_EVENT_MESSAGE) {
        printf("client: chat: %.*s\n", (int)ev.len, (const char *)ev.data);
      } else if (ev.kind == KEEL_EVENT_DISCONNECTED) {
        printf("client: disconnected (%s, code %llu, \"%s\")\n",
               ev.disconnect == KEEL_DISCONNECT_LOCAL ? "we closed" : "by the server or a timeout",
               (unsigned long long)ev.code, ev.reason);
        done = 1;
      }
    }
    if (check(rc, "poll")) break;
    double now = now_s();
    if (connected && !closing) {
      /* This frame's input: sequence number and a made-up stick position. */
      uint8_t input[8] = {(uint8_t)(tick >> 24), (uint8_t)(tick >> 16), (uint8_t)(tick >> 8),
                          (uint8_t)tick, 1, 2, 3, 4};
      tick++;
      check(keel_client_send(c, INPUT, input, sizeof input), "input");
      if (now - report >= 1) {
        keel_connection_stats st;
        keel_client_get_stats(c, &st, sizeof st);
        printf("client: rtt %.1f ms, loss %.1f %%, %llu B sent, %llu B received\n",
               st.rtt_us / 1e3, st.loss_rate * 100, (unsigned long long)st.bytes_sent,
               (unsigned long long)st.bytes_received);
        report = now;
      }
      if (now - started >= seconds || interrupted) {
        closing = 1;
        check(keel_client_close(c, 0, "player quit"), "close");
      }
    }
    next += frame;
    sleep_until(next);
  }
  keel_client_destroy(c);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 3 && argc <= 4 && strcmp(argv[1], "server") == 0) {
    return server(argv[2], argc == 4 ? argv[3] : NULL);
  }
  if (argc >= 3 && argc <= 5 && strcmp(argv[1], "client") == 0) {
    const char *token = argc >= 4 && strcmp(argv[3], "-") != 0 ? argv[3] : NULL;
    double seconds = argc == 5 ? atof(argv[4]) : 5;
    return client(argv[2], token, seconds > 0 ? seconds : 5);
  }
  fprintf(stderr,
          "usage: game server BIND_ADDR [KEY_HEX]\n"
          "       game client SERVER_ADDR [TOKEN_TEXT|-] [SECONDS]\n");
  return 2;
}
