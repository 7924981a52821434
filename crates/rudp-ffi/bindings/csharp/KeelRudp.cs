// keel-rudp from C# through P/Invoke: one file a Unity (or any .NET / Mono)
// project drops in, next to the native library keel_rudp_ffi
// (libkeel_rudp_ffi.so, keel_rudp_ffi.dll, libkeel_rudp_ffi.dylib).
//
// A binding of the C API in crates/rudp-ffi/include/keel_rudp.h (all of
// it); docs/c-api.md ("C#") says how to install it in Unity. Two regions:
//
// * "Raw imports" (class KeelNative): the header's constants, its structs
//   (keel_config, keel_event, keel_connection_stats, keel_server_stats) and
//   every function, declared exactly as in the header, for code that wants
//   the C API itself.
// * "Wrappers": KeelClient and KeelServer (IDisposable, over SafeHandles that
//   destroy the native handle), KeelEvent (an event copied into managed
//   memory), KeelConnectionStats / KeelServerStats (counters),
//   KeelCloseCode (keel's own close codes), KeelException (a KEEL_ERR_* code
//   and keel_error_message's text).
//
// No unsafe code: buffers are pinned with GCHandle and copied with
// Marshal.Copy, so a Unity project needs no "Allow 'unsafe' code". Strings
// cross as NUL-terminated UTF-8 byte arrays encoded here (not the
// marshaller's LPStr, which is the ANSI code page on .NET Framework on
// Windows). Written in C# 4 (Mono 6.8's mcs -langversion:4 compiles it).
//
// Ownership, lifetimes and threads are the header's:
// * a client or server is owned by its KeelClient / KeelServer from create /
//   connect until Dispose (or, if never disposed, until the garbage collector
//   finalizes its SafeHandle);
// * configs, addresses, reasons and send buffers are read during the call and
//   copied by the library: the caller keeps them and may reuse them at once;
// * the pointers in a native keel_event (data, reason) are valid only until
//   the next poll or destroy on that handle; the wrappers' Poll copies them
//   into KeelEvent.Data (byte[]) and KeelEvent.Reason (string) before it
//   returns, so a KeelEvent stays valid for as long as it is kept;
// * a handle may be used from any thread, but from one thread at a time
//   (different handles are independent). These classes add no locking: call
//   one KeelClient / KeelServer from one thread at a time, for example the
//   Unity main thread in Update(). No callbacks; nothing runs on a thread of
//   the library's own.

using System;
using System.Runtime.InteropServices;
using System.Text;
using Microsoft.Win32.SafeHandles;

namespace Keel.Rudp
{
    #region Raw imports

    /// <summary>
    /// The C API of keel_rudp.h, declared exactly: constants, structs and
    /// functions with the header's names. <c>size_t</c> is <see cref="UIntPtr"/>,
    /// pointers are <see cref="IntPtr"/>, <c>const char *</c> arguments are
    /// NUL-terminated UTF-8 <c>byte[]</c> (see <see cref="Utf8z"/>), and the
    /// opaque <c>keel_client *</c> / <c>keel_server *</c> are
    /// <see cref="KeelClientHandle"/> / <see cref="KeelServerHandle"/>
    /// (the same pointer, owned by a SafeHandle), except in the destroy
    /// functions, which take the raw pointer (the SafeHandles call them).
    /// Every rule of the header holds: see its comments for each function.
    /// </summary>
    public static class KeelNative
    {
        /// <summary>The native library's name. Mono and Unity look for
        /// libkeel_rudp_ffi.so (Linux, Android), keel_rudp_ffi.dll (Windows)
        /// and libkeel_rudp_ffi.dylib (macOS). On iOS the static library
        /// libkeel_rudp_ffi.a is linked into the app ("__Internal").</summary>
#if UNITY_IOS && !UNITY_EDITOR
        public const string Library = "__Internal";
#else
        public const string Library = "keel_rudp_ffi";
#endif

        // Error codes (KEEL_OK, KEEL_ERR_*).
        /// <summary>Success.</summary>
        public const int KEEL_OK = 0;
        /// <summary>A required pointer argument was NULL.</summary>
        public const int KEEL_ERR_NULL = -1;
        /// <summary>An argument is out of range: an unknown channel kind, text that is not UTF-8, a buffer too small.</summary>
        public const int KEEL_ERR_INVALID_ARGUMENT = -2;
        /// <summary>The address text is not <c>IP:port</c> (<c>127.0.0.1:4000</c>, <c>[::1]:4000</c>).</summary>
        public const int KEEL_ERR_ADDRESS = -3;
        /// <summary>The configuration was refused (channels: 1 to 256).</summary>
        public const int KEEL_ERR_CONFIG = -4;
        /// <summary>A socket operation failed (bind, send, receive).</summary>
        public const int KEEL_ERR_IO = -5;
        /// <summary>The connect token could not be parsed.</summary>
        public const int KEEL_ERR_TOKEN = -6;
        /// <summary>No such channel.</summary>
        public const int KEEL_ERR_UNKNOWN_CHANNEL = -7;
        /// <summary>The message is over <c>max_message_size</c>.</summary>
        public const int KEEL_ERR_MESSAGE_TOO_LARGE = -8;
        /// <summary>The connection holds <c>max_send_buffer</c> bytes: poll, then send again.</summary>
        public const int KEEL_ERR_BACKPRESSURE = -9;
        /// <summary>The server's shared send budget is spent: poll, then send again.</summary>
        public const int KEEL_ERR_BUDGET_SPENT = -10;
        /// <summary>The connection is closing or closed.</summary>
        public const int KEEL_ERR_CLOSED = -11;
        /// <summary>No connection has this handle (it ended, or never existed).</summary>
        public const int KEEL_ERR_UNKNOWN_CONNECTION = -12;

        // Channel kinds (KEEL_CHANNEL_*).
        /// <summary>Resent until acknowledged, delivered once, in order.</summary>
        public const uint KEEL_CHANNEL_RELIABLE_ORDERED = 0;
        /// <summary>Resent until acknowledged, delivered once, as soon as whole.</summary>
        public const uint KEEL_CHANNEL_RELIABLE_UNORDERED = 1;
        /// <summary>Never resent; older than one already delivered is dropped.</summary>
        public const uint KEEL_CHANNEL_UNRELIABLE_SEQUENCED = 2;
        /// <summary>Never resent; delivered at most once, as it arrives.</summary>
        public const uint KEEL_CHANNEL_UNRELIABLE = 3;

        // keel_event.kind (KEEL_EVENT_*).
        /// <summary>Nothing happened within the timeout.</summary>
        public const uint KEEL_EVENT_NONE = 0;
        /// <summary>The handshake finished (server: a new connection).</summary>
        public const uint KEEL_EVENT_CONNECTED = 1;
        /// <summary>A message arrived (<c>channel</c>, <c>data</c>, <c>len</c>).</summary>
        public const uint KEEL_EVENT_MESSAGE = 2;
        /// <summary>The connection ended (<c>disconnect</c>, <c>code</c>, <c>reason</c>).</summary>
        public const uint KEEL_EVENT_DISCONNECTED = 3;
        /// <summary>Server only, once after <see cref="keel_server_stop"/>: every connection ended (or the stop's deadline passed); destroy the server.</summary>
        public const uint KEEL_EVENT_STOPPED = 4;

        // keel_server_connection_state (KEEL_STATE_*).
        /// <summary>The handshake is not finished.</summary>
        public const uint KEEL_STATE_HANDSHAKING = 0;
        /// <summary>Messages flow.</summary>
        public const uint KEEL_STATE_CONNECTED = 1;
        /// <summary>Closed by this side; queued reliable messages are flushed, the close repeated until acknowledged.</summary>
        public const uint KEEL_STATE_CLOSING = 2;
        /// <summary>Closed by the peer.</summary>
        public const uint KEEL_STATE_DRAINING = 3;
        /// <summary>Ended; its DISCONNECTED event is waiting to be polled.</summary>
        public const uint KEEL_STATE_CLOSED = 4;

        // keel's own close codes (KEEL_REFUSE_*, KEEL_CLOSE_*): keel_event.code.
        /// <summary>Close code: the server refused the handshake, the two ends configure different channels.</summary>
        public const ulong KEEL_REFUSE_CONFIG_MISMATCH = 1;
        /// <summary>Close code: the server was full (<c>max_connections</c>).</summary>
        public const ulong KEEL_REFUSE_FULL = 2;
        /// <summary>Close code: a token to an insecure server, or none to one requiring tokens.</summary>
        public const ulong KEEL_REFUSE_SECURITY_MISMATCH = 3;
        /// <summary>Close code: the connect token was refused (the reason says why).</summary>
        public const ulong KEEL_REFUSE_TOKEN = 4;
        /// <summary>Close code: the peer stopped (<see cref="keel_server_stop"/>'s usual code).</summary>
        public const ulong KEEL_CLOSE_STOPPED = 5;
        /// <summary>Close code: the client's address holds the most connections one address may.</summary>
        public const ulong KEEL_REFUSE_ADDRESS_LIMIT = 6;
        /// <summary>Close code: the client's address made too many handshakes.</summary>
        public const ulong KEEL_REFUSE_RATE_LIMIT = 7;
        /// <summary>Close code: a new connection with the same connect token replaced it.</summary>
        public const ulong KEEL_CLOSE_REPLACED = 8;
        /// <summary>Close code: the peer acknowledged nothing for the ack timeout.</summary>
        public const ulong KEEL_CLOSE_ACK_TIMEOUT = 17;

        // keel_event.disconnect (KEEL_DISCONNECT_*).
        /// <summary>This side called close (<c>code</c>, <c>reason</c> as given).</summary>
        public const uint KEEL_DISCONNECT_LOCAL = 1;
        /// <summary>The peer closed, or the server refused (<c>code</c>, <c>reason</c> from the peer).</summary>
        public const uint KEEL_DISCONNECT_REMOTE = 2;
        /// <summary>Nothing arrived for the idle timeout.</summary>
        public const uint KEEL_DISCONNECT_IDLE_TIMEOUT = 3;
        /// <summary>No answer to the handshake in time.</summary>
        public const uint KEEL_DISCONNECT_HANDSHAKE_TIMEOUT = 4;
        /// <summary>The peer acknowledged nothing for the ack timeout.</summary>
        public const uint KEEL_DISCONNECT_ACK_TIMEOUT = 5;
        /// <summary>A cause this version of the header does not name (a newer library).</summary>
        public const uint KEEL_DISCONNECT_OTHER = 6;

        /// <summary><c>struct keel_config</c>: the settings of a client or
        /// server (both ends configure the same channels). Read only during
        /// the call it is passed to; <c>channels</c> must stay pinned for
        /// that call (the wrappers pin a <c>uint[]</c>).</summary>
        [StructLayout(LayoutKind.Sequential)]
        public struct keel_config
        {
            /// <summary><c>const uint32_t *</c>: <c>channel_count</c> channel kinds (KEEL_CHANNEL_*), channel 0 first.</summary>
            public IntPtr channels;
            /// <summary><c>size_t</c>: 1 to 256.</summary>
            public UIntPtr channel_count;
        }

        /// <summary><c>struct keel_event</c>: one event from a poll call.
        /// <c>data</c> and <c>reason</c> point into the polled handle and are
        /// valid until the next poll or destroy call on that handle: copy
        /// what you keep (<see cref="KeelEvent"/> does).</summary>
        [StructLayout(LayoutKind.Sequential)]
        public struct keel_event
        {
            /// <summary><c>uint32_t</c>: KEEL_EVENT_*.</summary>
            public uint kind;
            /// <summary><c>uint64_t</c>: server: the connection's handle (never 0); client: 0.</summary>
            public ulong connection;
            /// <summary><c>uint32_t</c>: MESSAGE: the channel it came on.</summary>
            public uint channel;
            /// <summary><c>const uint8_t *</c>: MESSAGE: the message's bytes (<c>len</c> of them; NULL when <c>len</c> is 0).</summary>
            public IntPtr data;
            /// <summary><c>size_t</c>: MESSAGE: its length.</summary>
            public UIntPtr len;
            /// <summary><c>uint32_t</c>: DISCONNECTED: why (KEEL_DISCONNECT_*).</summary>
            public uint disconnect;
            /// <summary><c>uint64_t</c>: DISCONNECTED, LOCAL or REMOTE: the close code.</summary>
            public ulong code;
            /// <summary><c>const char *</c>: DISCONNECTED: the reason, NUL-terminated UTF-8 (empty for the timeouts). Never NULL after a poll that returned an event.</summary>
            public IntPtr reason;
            /// <summary><c>size_t</c>: the reason's length in bytes, without the NUL.</summary>
            public UIntPtr reason_len;
        }

        /// <summary><c>struct keel_connection_stats</c>: one connection's counters and estimates, from <see cref="keel_client_get_stats"/> or <see cref="keel_server_get_connection_stats"/> (pass its <c>Marshal.SizeOf</c> as <c>out_size</c>). Fields are only ever added at the end.</summary>
        [StructLayout(LayoutKind.Sequential)]
        public struct keel_connection_stats
        {
            /// <summary><c>uint64_t</c>: Smoothed round-trip time, microseconds.</summary>
            public ulong rtt_us;
            /// <summary><c>uint64_t</c>: Its variation, microseconds.</summary>
            public ulong rtt_var_us;
            /// <summary><c>uint64_t</c>: Least round-trip time seen, microseconds.</summary>
            public ulong rtt_min_us;
            /// <summary><c>uint64_t</c>: Latest sample, microseconds.</summary>
            public ulong rtt_latest_us;
            /// <summary><c>double</c>: Packets lost over packets acknowledged or lost (0 to 1).</summary>
            public double loss_rate;
            /// <summary><c>uint64_t</c>: Packets sent.</summary>
            public ulong packets_sent;
            /// <summary><c>uint64_t</c>: Packets received and accepted.</summary>
            public ulong packets_received;
            /// <summary><c>uint64_t</c>: Packets declared lost.</summary>
            public ulong packets_lost;
            /// <summary><c>uint64_t</c>: Message pieces sent again after a loss.</summary>
            public ulong retransmissions;
            /// <summary><c>uint64_t</c>: Bytes sent in datagrams.</summary>
            public ulong bytes_sent;
            /// <summary><c>uint64_t</c>: Bytes received in datagrams.</summary>
            public ulong bytes_received;
            /// <summary><c>uint64_t</c>: Messages delivered to this side.</summary>
            public ulong messages_delivered;
            /// <summary><c>uint64_t</c>: Bytes queued or unacknowledged, all channels.</summary>
            public ulong send_queued_bytes;
            /// <summary><c>uint64_t</c>: Bytes sent and not yet acknowledged or lost.</summary>
            public ulong bytes_in_flight;
            /// <summary><c>uint64_t</c>: The congestion window, bytes.</summary>
            public ulong congestion_window;
            /// <summary><c>uint64_t</c>: Datagrams dropped as malformed.</summary>
            public ulong malformed_packets;
            /// <summary><c>uint64_t</c>: Datagrams dropped as received twice.</summary>
            public ulong duplicate_packets;
            /// <summary><c>uint64_t</c>: Datagrams dropped: failed authentication.</summary>
            public ulong auth_failures;
            /// <summary><c>uint64_t</c>: Datagrams dropped: replayed.</summary>
            public ulong replayed_packets;
            /// <summary><c>uint64_t</c>: Datagrams not acknowledged for lack of receive memory or window (the peer resends).</summary>
            public ulong refused_packets;
            /// <summary><c>uint64_t</c>: Messages dropped as older than one delivered (sequenced channels).</summary>
            public ulong stale_messages;
            /// <summary><c>uint64_t</c>: Partly received unreliable messages dropped for newer ones.</summary>
            public ulong partials_evicted;
            /// <summary><c>uint64_t</c>: Client only: datagrams not sent because the socket buffer was full (reliable ones are resent). Server connections: 0 (see <c>keel_server_stats</c>).</summary>
            public ulong datagrams_unsent;
            /// <summary><c>uint64_t</c>: Client only: datagrams the kernel dropped because the client socket's receive buffer was full (Linux <c>SO_RXQ_OVFL</c>; 0 elsewhere). Server connections: 0 (see <c>keel_server_stats</c>). Added after 0.1.0: a library without it fills the older 184 bytes and leaves it 0.</summary>
            public ulong kernel_drops;
        }

        /// <summary><c>struct keel_server_stats</c>: a server's counters, from <see cref="keel_server_get_stats"/> (pass its <c>Marshal.SizeOf</c> as <c>out_size</c>). Fields are only ever added at the end.</summary>
        [StructLayout(LayoutKind.Sequential)]
        public struct keel_server_stats
        {
            /// <summary><c>uint64_t</c>: Connections held now (closing ones included).</summary>
            public ulong connections;
            /// <summary><c>uint64_t</c>: Connections made.</summary>
            public ulong connections_created;
            /// <summary><c>uint64_t</c>: Connections removed after they ended.</summary>
            public ulong connections_removed;
            /// <summary><c>uint64_t</c>: Handshake packets received.</summary>
            public ulong hellos;
            /// <summary><c>uint64_t</c>: Handshakes refused, whatever the cause (config, full, token, security, admission limits).</summary>
            public ulong handshakes_refused;
            /// <summary><c>uint64_t</c>: Of those, for a token (forged, expired, another server or key, replayed).</summary>
            public ulong tokens_refused;
            /// <summary><c>uint64_t</c>: Of those, for the per-address connection limit.</summary>
            public ulong refused_address_limit;
            /// <summary><c>uint64_t</c>: Of those, for the per-address handshake rate.</summary>
            public ulong refused_rate_limit;
            /// <summary><c>uint64_t</c>: Datagrams dropped as malformed.</summary>
            public ulong malformed;
            /// <summary><c>uint64_t</c>: Datagrams dropped: for no known connection.</summary>
            public ulong unknown_connection;
            /// <summary><c>uint64_t</c>: Datagrams not sent because the socket buffer was full.</summary>
            public ulong datagrams_unsent;
            /// <summary><c>uint64_t</c>: Message pieces refused: the shared receive budget was spent.</summary>
            public ulong budget_refused;
            /// <summary><c>uint64_t</c>: Sends refused: the shared send budget was spent.</summary>
            public ulong send_budget_refused;
            /// <summary><c>uint64_t</c>: Broadcast copies not queued (a connection's send buffer or the send budget was full).</summary>
            public ulong broadcast_refused;
            /// <summary><c>uint64_t</c>: Connections ended because the peer acknowledged nothing.</summary>
            public ulong ack_timeouts;
            /// <summary><c>uint64_t</c>: Messages never acknowledged by connections that were removed.</summary>
            public ulong undelivered_messages;
            /// <summary><c>uint64_t</c>: Datagrams the kernel dropped because the server socket's receive buffer was full, before the server read them (Linux <c>SO_RXQ_OVFL</c> and the socket's drop counter, read at the call; 0 elsewhere). Counted until the server is destroyed, also after STOPPED. Added after 0.1.0: a library without it fills the older 128 bytes and leaves it 0.</summary>
            public ulong kernel_drops;
        }

        /// <summary><c>const char *keel_error_message(int32_t code)</c>: a
        /// static NUL-terminated English message (never NULL, never freed;
        /// hence IntPtr, not string, which the marshaller would free). See
        /// <see cref="ErrorMessage"/>.</summary>
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern IntPtr keel_error_message(int code);

        /// <summary><c>keel_client_connect_insecure(cfg, server_addr, out)</c>:
        /// a new client connecting in insecure mode (no token, no
        /// encryption: LAN tools and tests). On error <c>out</c> is
        /// invalid.</summary>
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern int keel_client_connect_insecure(
            ref keel_config cfg, byte[] server_addr, out KeelClientHandle client);

        /// <summary><c>keel_client_connect_token(cfg, server_addr, token_text, out)</c>:
        /// with a connect token's text form (base64url) from the backend.</summary>
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern int keel_client_connect_token(
            ref keel_config cfg, byte[] server_addr, byte[] token_text, out KeelClientHandle client);

        /// <summary><c>keel_client_connect_token_bytes(cfg, server_addr, token, len, out)</c>:
        /// with a connect token's binary form (<c>len</c> bytes at <c>token</c>, read during the call).</summary>
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern int keel_client_connect_token_bytes(
            ref keel_config cfg, byte[] server_addr, byte[] token, UIntPtr len, out KeelClientHandle client);

        /// <summary><c>void keel_client_destroy(keel_client *)</c>: frees a
        /// client (NULL is ignored; no close is sent). Called by
        /// <see cref="KeelClientHandle"/>; do not call it on a pointer a
        /// SafeHandle still owns.</summary>
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern void keel_client_destroy(IntPtr client);

        /// <summary><c>keel_client_send(client, channel, data, len)</c>:
        /// queues <c>len</c> bytes at <c>data</c> (copied; may be NULL when
        /// <c>len</c> is 0); they go out on the next poll.</summary>
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern int keel_client_send(
            KeelClientHandle client, byte channel, IntPtr data, UIntPtr len);

        /// <summary><c>keel_client_close(client, code, reason)</c>: starts
        /// closing (<c>reason</c>: NUL-terminated UTF-8 or NULL; at most 128
        /// bytes are sent); poll until DISCONNECTED (LOCAL).</summary>
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern int keel_client_close(KeelClientHandle client, ulong code, byte[] reason);

        /// <summary><c>keel_client_poll(client, timeout_ms, ev)</c>: does the
        /// client's work on the calling thread and fills <c>ev</c> with the
        /// next event, waiting up to <c>timeout_ms</c> (0: do not wait).
        /// Returns 1 (an event), 0 (none) or a KEEL_ERR_* code. The previous
        /// event's <c>data</c> and <c>reason</c> become invalid.</summary>
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern int keel_client_poll(KeelClientHandle client, uint timeout_ms, out keel_event ev);

        /// <summary><c>keel_client_get_stats(client, out, out_size)</c>:
        /// fills <c>stats</c> with the client's counters and estimates;
        /// pass <c>Marshal.SizeOf(typeof(keel_connection_stats))</c> as
        /// <c>out_size</c>.</summary>
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern int keel_client_get_stats(
            KeelClientHandle client, out keel_connection_stats stats, UIntPtr out_size);

        /// <summary><c>keel_server_create_insecure(cfg, bind_addr, out)</c>:
        /// a new server bound to <c>bind_addr</c> (port 0 picks one) in
        /// insecure mode. On error <c>out</c> is invalid.</summary>
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern int keel_server_create_insecure(
            ref keel_config cfg, byte[] bind_addr, out KeelServerHandle server);

        /// <summary><c>keel_server_create_token(cfg, bind_addr, token_key, out)</c>:
        /// requiring connect tokens sealed with the 32 bytes at
        /// <c>token_key</c> (the array must hold at least 32).</summary>
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern int keel_server_create_token(
            ref keel_config cfg, byte[] bind_addr, byte[] token_key, out KeelServerHandle server);

        /// <summary><c>void keel_server_destroy(keel_server *)</c>: frees a
        /// server and all its connections (none is closed; NULL is ignored).
        /// Called by <see cref="KeelServerHandle"/>.</summary>
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern void keel_server_destroy(IntPtr server);

        /// <summary><c>keel_server_local_addr(server, buf, len)</c>: writes
        /// the bound address as NUL-terminated text into <c>buf</c> of
        /// <c>len</c> bytes (64 is always enough).</summary>
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern int keel_server_local_addr(KeelServerHandle server, [Out] byte[] buf, UIntPtr len);

        /// <summary><c>keel_server_send(server, connection, channel, data, len)</c>:
        /// queues <c>len</c> bytes at <c>data</c> (copied) on <c>channel</c>
        /// of <c>connection</c>.</summary>
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern int keel_server_send(
            KeelServerHandle server, ulong connection, byte channel, IntPtr data, UIntPtr len);

        /// <summary><c>keel_server_close(server, connection, code, reason)</c>:
        /// starts closing <c>connection</c>; the server gets its DISCONNECTED
        /// event (LOCAL) once it ends.</summary>
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern int keel_server_close(
            KeelServerHandle server, ulong connection, ulong code, byte[] reason);

        /// <summary><c>keel_server_poll(server, timeout_ms, ev)</c>: as
        /// <see cref="keel_client_poll"/>, for all of the server's
        /// connections (<c>ev.connection</c> names one).</summary>
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern int keel_server_poll(KeelServerHandle server, uint timeout_ms, out keel_event ev);

        /// <summary><c>keel_server_get_stats(server, out, out_size)</c>:
        /// fills <c>stats</c> with the server's counters; pass
        /// <c>Marshal.SizeOf(typeof(keel_server_stats))</c> as
        /// <c>out_size</c>.</summary>
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern int keel_server_get_stats(
            KeelServerHandle server, out keel_server_stats stats, UIntPtr out_size);

        /// <summary><c>keel_server_get_connection_stats(server, connection, out, out_size)</c>:
        /// fills <c>stats</c> with <c>connection</c>'s counters and estimates
        /// (KEEL_ERR_UNKNOWN_CONNECTION once its DISCONNECTED event was
        /// returned); pass <c>Marshal.SizeOf(typeof(keel_connection_stats))</c>.</summary>
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern int keel_server_get_connection_stats(
            KeelServerHandle server, ulong connection, out keel_connection_stats stats, UIntPtr out_size);

        /// <summary><c>size_t keel_server_connection_count(server)</c>:
        /// connections the server holds now, closing ones included.</summary>
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern UIntPtr keel_server_connection_count(KeelServerHandle server);

        /// <summary><c>keel_server_connection_state(server, connection, state)</c>:
        /// writes <c>connection</c>'s KEEL_STATE_* to <c>state</c>
        /// (KEEL_ERR_UNKNOWN_CONNECTION once its DISCONNECTED event was
        /// returned).</summary>
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern int keel_server_connection_state(
            KeelServerHandle server, ulong connection, out uint state);

        /// <summary><c>keel_server_broadcast(server, channel, data, len, queued)</c>:
        /// queues <c>len</c> bytes at <c>data</c> (copied) on <c>channel</c>
        /// of every connected connection; <c>queued</c> is how many got it
        /// (one whose send buffer or the send budget is full is skipped and
        /// counted in <c>keel_server_stats.broadcast_refused</c>).</summary>
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern int keel_server_broadcast(
            KeelServerHandle server, byte channel, IntPtr data, UIntPtr len, out UIntPtr queued);

        /// <summary><c>keel_server_stop(server, code, reason)</c>: closes
        /// every connection with <c>code</c> (usually KEEL_CLOSE_STOPPED) and
        /// <c>reason</c> (NUL-terminated UTF-8 or NULL; at most 128 bytes
        /// sent), and those that finish a handshake from now on. Keep
        /// polling: each connection's DISCONNECTED (LOCAL) event, then one
        /// KEEL_EVENT_STOPPED last (at most close_timeout, 2 s, plus 1 s
        /// later). A second call changes nothing.</summary>
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern int keel_server_stop(KeelServerHandle server, ulong code, byte[] reason);

        // Helpers for the raw functions.

        /// <summary><c>keel_error_message(code)</c> as a string.</summary>
        public static string ErrorMessage(int code)
        {
            return PtrToUtf8z(keel_error_message(code));
        }

        /// <summary><paramref name="s"/> as NUL-terminated UTF-8, for a
        /// <c>const char *</c> argument; null stays null (NULL).</summary>
        public static byte[] Utf8z(string s)
        {
            if (s == null)
                return null;
            byte[] z = new byte[Encoding.UTF8.GetByteCount(s) + 1];
            Encoding.UTF8.GetBytes(s, 0, s.Length, z, 0);
            return z;
        }

        /// <summary>The NUL-terminated UTF-8 text at <paramref name="p"/>
        /// (null for NULL).</summary>
        public static string PtrToUtf8z(IntPtr p)
        {
            if (p == IntPtr.Zero)
                return null;
            int n = 0;
            while (Marshal.ReadByte(p, n) != 0)
                n++;
            return PtrToUtf8(p, n);
        }

        /// <summary>The <paramref name="len"/> bytes of UTF-8 at
        /// <paramref name="p"/> as a string (invalid bytes become U+FFFD).</summary>
        public static string PtrToUtf8(IntPtr p, int len)
        {
            if (p == IntPtr.Zero || len == 0)
                return "";
            byte[] b = new byte[len];
            Marshal.Copy(p, b, 0, len);
            return Encoding.UTF8.GetString(b);
        }
    }

    /// <summary>Owns a <c>keel_client *</c>: releasing it (Dispose, or the
    /// finalizer of an undisposed handle) calls <c>keel_client_destroy</c>
    /// once. The P/Invoke marshaller keeps it alive during each call, so a
    /// Dispose on another thread cannot free the client under a running
    /// call (but the one-thread-at-a-time rule still applies).</summary>
    public sealed class KeelClientHandle : SafeHandleZeroOrMinusOneIsInvalid
    {
        /// <summary>An invalid handle, for the marshaller to fill.</summary>
        public KeelClientHandle() : base(true) { }

        /// <summary>Calls <c>keel_client_destroy</c>.</summary>
        protected override bool ReleaseHandle()
        {
            KeelNative.keel_client_destroy(handle);
            return true;
        }
    }

    /// <summary>Owns a <c>keel_server *</c>: releasing it calls
    /// <c>keel_server_destroy</c> once (as <see cref="KeelClientHandle"/>).</summary>
    public sealed class KeelServerHandle : SafeHandleZeroOrMinusOneIsInvalid
    {
        /// <summary>An invalid handle, for the marshaller to fill.</summary>
        public KeelServerHandle() : base(true) { }

        /// <summary>Calls <c>keel_server_destroy</c>.</summary>
        protected override bool ReleaseHandle()
        {
            KeelNative.keel_server_destroy(handle);
            return true;
        }
    }

    #endregion

    #region Wrappers

    /// <summary>A channel's kind (KEEL_CHANNEL_*).</summary>
    public enum ChannelKind : uint
    {
        /// <summary>Resent until acknowledged, delivered once, in order.</summary>
        ReliableOrdered = KeelNative.KEEL_CHANNEL_RELIABLE_ORDERED,
        /// <summary>Resent until acknowledged, delivered once, as soon as whole.</summary>
        ReliableUnordered = KeelNative.KEEL_CHANNEL_RELIABLE_UNORDERED,
        /// <summary>Never resent; older than one already delivered is dropped.</summary>
        UnreliableSequenced = KeelNative.KEEL_CHANNEL_UNRELIABLE_SEQUENCED,
        /// <summary>Never resent; delivered at most once, as it arrives.</summary>
        Unreliable = KeelNative.KEEL_CHANNEL_UNRELIABLE,
    }

    /// <summary>An event's kind (KEEL_EVENT_*).</summary>
    public enum EventKind : uint
    {
        /// <summary>Nothing happened (only in an event Poll did not return).</summary>
        None = KeelNative.KEEL_EVENT_NONE,
        /// <summary>The handshake finished (server: a new connection).</summary>
        Connected = KeelNative.KEEL_EVENT_CONNECTED,
        /// <summary>A message arrived (<see cref="KeelEvent.Channel"/>, <see cref="KeelEvent.Data"/>).</summary>
        Message = KeelNative.KEEL_EVENT_MESSAGE,
        /// <summary>The connection ended (<see cref="KeelEvent.Disconnect"/>, <see cref="KeelEvent.Code"/>, <see cref="KeelEvent.Reason"/>).</summary>
        Disconnected = KeelNative.KEEL_EVENT_DISCONNECTED,
        /// <summary>Server only, once after <see cref="KeelServer.Stop"/>: every connection ended; dispose the server.</summary>
        Stopped = KeelNative.KEEL_EVENT_STOPPED,
    }

    /// <summary>A server connection's state (KEEL_STATE_*), from <see cref="KeelServer.ConnectionState"/>.</summary>
    public enum ConnectionState : uint
    {
        /// <summary>The handshake is not finished.</summary>
        Handshaking = KeelNative.KEEL_STATE_HANDSHAKING,
        /// <summary>Messages flow (sends are accepted).</summary>
        Connected = KeelNative.KEEL_STATE_CONNECTED,
        /// <summary>Closed by this side; queued reliable messages are flushed, the close repeated until acknowledged.</summary>
        Closing = KeelNative.KEEL_STATE_CLOSING,
        /// <summary>Closed by the peer.</summary>
        Draining = KeelNative.KEEL_STATE_DRAINING,
        /// <summary>Ended; its Disconnected event is waiting to be polled.</summary>
        Closed = KeelNative.KEEL_STATE_CLOSED,
    }

    /// <summary>keel's own close codes (KEEL_REFUSE_*, KEEL_CLOSE_*), as
    /// <see cref="KeelEvent.Code"/> of a refused handshake or of a close by
    /// keel itself; a game's own codes are any others.</summary>
    public static class KeelCloseCode
    {
        /// <summary>The server refused the handshake: the two ends configure different channels.</summary>
        public const ulong RefuseConfigMismatch = KeelNative.KEEL_REFUSE_CONFIG_MISMATCH;
        /// <summary>The server was full (<c>max_connections</c>).</summary>
        public const ulong RefuseFull = KeelNative.KEEL_REFUSE_FULL;
        /// <summary>A token to an insecure server, or none to one requiring tokens.</summary>
        public const ulong RefuseSecurityMismatch = KeelNative.KEEL_REFUSE_SECURITY_MISMATCH;
        /// <summary>The connect token was refused (the reason says why).</summary>
        public const ulong RefuseToken = KeelNative.KEEL_REFUSE_TOKEN;
        /// <summary>The peer stopped (<see cref="KeelServer.Stop"/>'s usual code).</summary>
        public const ulong Stopped = KeelNative.KEEL_CLOSE_STOPPED;
        /// <summary>The client's address holds the most connections one address may.</summary>
        public const ulong RefuseAddressLimit = KeelNative.KEEL_REFUSE_ADDRESS_LIMIT;
        /// <summary>The client's address made too many handshakes.</summary>
        public const ulong RefuseRateLimit = KeelNative.KEEL_REFUSE_RATE_LIMIT;
        /// <summary>A new connection with the same connect token replaced it.</summary>
        public const ulong Replaced = KeelNative.KEEL_CLOSE_REPLACED;
        /// <summary>The peer acknowledged nothing for the ack timeout.</summary>
        public const ulong AckTimeout = KeelNative.KEEL_CLOSE_ACK_TIMEOUT;
    }

    /// <summary>Why a connection ended (KEEL_DISCONNECT_*).</summary>
    public enum DisconnectKind : uint
    {
        /// <summary>Not a DISCONNECTED event.</summary>
        None = 0,
        /// <summary>This side called close (code and reason as given).</summary>
        Local = KeelNative.KEEL_DISCONNECT_LOCAL,
        /// <summary>The peer closed, or the server refused (code and reason from the peer).</summary>
        Remote = KeelNative.KEEL_DISCONNECT_REMOTE,
        /// <summary>Nothing arrived for the idle timeout.</summary>
        IdleTimeout = KeelNative.KEEL_DISCONNECT_IDLE_TIMEOUT,
        /// <summary>No answer to the handshake in time.</summary>
        HandshakeTimeout = KeelNative.KEEL_DISCONNECT_HANDSHAKE_TIMEOUT,
        /// <summary>The peer acknowledged nothing for the ack timeout.</summary>
        AckTimeout = KeelNative.KEEL_DISCONNECT_ACK_TIMEOUT,
        /// <summary>A cause this version of the binding does not name (a newer library).</summary>
        Other = KeelNative.KEEL_DISCONNECT_OTHER,
    }

    /// <summary>A failed call: <see cref="Code"/> is the KEEL_ERR_* code
    /// (KeelNative.KEEL_ERR_*), <see cref="KeelMessage"/> keel_error_message's
    /// text, <see cref="Call"/> the C function that returned it.</summary>
    public class KeelException : Exception
    {
        /// <summary>The KEEL_ERR_* code (negative).</summary>
        public int Code { get; private set; }
        /// <summary><c>keel_error_message(Code)</c>.</summary>
        public string KeelMessage { get; private set; }
        /// <summary>The C function that failed (<c>keel_client_send</c>).</summary>
        public string Call { get; private set; }

        /// <summary>An exception for <paramref name="code"/> returned by <paramref name="call"/>.</summary>
        public KeelException(int code, string call)
            : base(call + ": " + KeelNative.ErrorMessage(code) + " (" + code + ")")
        {
            Code = code;
            KeelMessage = KeelNative.ErrorMessage(code);
            Call = call;
        }

        /// <summary>Throws for a negative <paramref name="rc"/>; returns it otherwise.</summary>
        internal static int Check(int rc, string call)
        {
            if (rc < 0)
                throw new KeelException(rc, call);
            return rc;
        }
    }

    /// <summary>One event, copied out of the library: valid for as long as
    /// it is kept, after later polls and after Dispose.</summary>
    public struct KeelEvent
    {
        /// <summary>What happened.</summary>
        public EventKind Kind;
        /// <summary>Server: the connection's handle (never 0), valid from its
        /// Connected event until its Disconnected event was returned (then it
        /// names nothing, even once a later connection takes its slot: handles
        /// carry a generation). Client, and a Stopped event: 0.</summary>
        public ulong Connection;
        /// <summary>Message: the channel it came on.</summary>
        public uint Channel;
        /// <summary>Message: its bytes (a new array each event; empty, never
        /// null, for other kinds).</summary>
        public byte[] Data;
        /// <summary>Disconnected: why.</summary>
        public DisconnectKind Disconnect;
        /// <summary>Disconnected, Local or Remote: the close code.</summary>
        public ulong Code;
        /// <summary>Disconnected: the reason (empty for the timeouts; "" for
        /// other kinds, never null).</summary>
        public string Reason;

        static readonly byte[] Empty = new byte[0];

        /// <summary>Copies <paramref name="ev"/>'s bytes and reason into
        /// managed memory, while they are still valid (before the next poll
        /// or destroy on the handle that filled it).</summary>
        public static KeelEvent CopyFrom(ref KeelNative.keel_event ev)
        {
            KeelEvent e = new KeelEvent();
            e.Kind = (EventKind)ev.kind;
            e.Connection = ev.connection;
            e.Channel = ev.channel;
            e.Data = Empty;
            ulong len = ev.len.ToUInt64();
            if (len > int.MaxValue)
                throw new OverflowException("keel_event.len " + len + " is over a byte[]'s limit");
            if (len > 0)
            {
                e.Data = new byte[(int)len];
                Marshal.Copy(ev.data, e.Data, 0, (int)len);
            }
            e.Disconnect = (DisconnectKind)ev.disconnect;
            e.Code = ev.code;
            ulong rlen = ev.reason_len.ToUInt64();
            e.Reason = rlen > 0 && rlen <= int.MaxValue ? KeelNative.PtrToUtf8(ev.reason, (int)rlen) : "";
            return e;
        }

        /// <summary>The end of <see cref="KeelClient.Poll"/> and
        /// <see cref="KeelServer.Poll"/>: false and a default
        /// <paramref name="ev"/> when the poll's (checked) return code
        /// <paramref name="rc"/> says no event came, else true and the event
        /// copied out of <paramref name="raw"/>.</summary>
        internal static bool FromPoll(int rc, ref KeelNative.keel_event raw, out KeelEvent ev)
        {
            if (rc == 0)
            {
                ev = default(KeelEvent);
                return false;
            }
            ev = CopyFrom(ref raw);
            return true;
        }

        /// <summary>For logs: the kind and the fields that kind uses.</summary>
        public override string ToString()
        {
            switch (Kind)
            {
                case EventKind.Message:
                    return "Message(connection " + Connection + ", channel " + Channel + ", " + Data.Length + " bytes)";
                case EventKind.Disconnected:
                    return "Disconnected(connection " + Connection + ", " + Disconnect + ", code " + Code + ", \"" + Reason + "\")";
                default:
                    return Kind + "(connection " + Connection + ")";
            }
        }
    }

    /// <summary>One connection's counters and estimates (<see cref="KeelClient.Stats"/>, <see cref="KeelServer.ConnectionStats"/>), copied from <see cref="KeelNative.keel_connection_stats"/>. Before a first RTT sample the RTT fields hold the initial estimate (333 ms by default).</summary>
    public struct KeelConnectionStats
    {
        /// <summary>Smoothed round-trip time, microseconds.</summary>
        public ulong RttUs;
        /// <summary>Its variation, microseconds.</summary>
        public ulong RttVarUs;
        /// <summary>Least round-trip time seen, microseconds.</summary>
        public ulong RttMinUs;
        /// <summary>Latest sample, microseconds.</summary>
        public ulong RttLatestUs;
        /// <summary>Packets lost over packets acknowledged or lost (0 to 1).</summary>
        public double LossRate;
        /// <summary>Packets sent.</summary>
        public ulong PacketsSent;
        /// <summary>Packets received and accepted.</summary>
        public ulong PacketsReceived;
        /// <summary>Packets declared lost.</summary>
        public ulong PacketsLost;
        /// <summary>Message pieces sent again after a loss.</summary>
        public ulong Retransmissions;
        /// <summary>Bytes sent in datagrams.</summary>
        public ulong BytesSent;
        /// <summary>Bytes received in datagrams.</summary>
        public ulong BytesReceived;
        /// <summary>Messages delivered to this side.</summary>
        public ulong MessagesDelivered;
        /// <summary>Bytes queued or unacknowledged, all channels.</summary>
        public ulong SendQueuedBytes;
        /// <summary>Bytes sent and not yet acknowledged or lost.</summary>
        public ulong BytesInFlight;
        /// <summary>The congestion window, bytes.</summary>
        public ulong CongestionWindow;
        /// <summary>Datagrams dropped as malformed.</summary>
        public ulong MalformedPackets;
        /// <summary>Datagrams dropped as received twice.</summary>
        public ulong DuplicatePackets;
        /// <summary>Datagrams dropped: failed authentication.</summary>
        public ulong AuthFailures;
        /// <summary>Datagrams dropped: replayed.</summary>
        public ulong ReplayedPackets;
        /// <summary>Datagrams not acknowledged for lack of receive memory or window (the peer resends).</summary>
        public ulong RefusedPackets;
        /// <summary>Messages dropped as older than one delivered (sequenced channels).</summary>
        public ulong StaleMessages;
        /// <summary>Partly received unreliable messages dropped for newer ones.</summary>
        public ulong PartialsEvicted;
        /// <summary>Client only: datagrams not sent because the socket buffer was full (reliable ones are resent). Server connections: 0 (see <c>keel_server_stats</c>).</summary>
        public ulong DatagramsUnsent;
        /// <summary>Client only: datagrams the kernel dropped because the client socket's receive buffer was full (Linux <c>SO_RXQ_OVFL</c>; 0 elsewhere). Server connections: 0 (see <c>keel_server_stats</c>).</summary>
        public ulong KernelDrops;

        /// <summary>Copies <paramref name="s"/> field by field.</summary>
        public static KeelConnectionStats CopyFrom(ref KeelNative.keel_connection_stats s)
        {
            KeelConnectionStats w = new KeelConnectionStats();
            w.RttUs = s.rtt_us;
            w.RttVarUs = s.rtt_var_us;
            w.RttMinUs = s.rtt_min_us;
            w.RttLatestUs = s.rtt_latest_us;
            w.LossRate = s.loss_rate;
            w.PacketsSent = s.packets_sent;
            w.PacketsReceived = s.packets_received;
            w.PacketsLost = s.packets_lost;
            w.Retransmissions = s.retransmissions;
            w.BytesSent = s.bytes_sent;
            w.BytesReceived = s.bytes_received;
            w.MessagesDelivered = s.messages_delivered;
            w.SendQueuedBytes = s.send_queued_bytes;
            w.BytesInFlight = s.bytes_in_flight;
            w.CongestionWindow = s.congestion_window;
            w.MalformedPackets = s.malformed_packets;
            w.DuplicatePackets = s.duplicate_packets;
            w.AuthFailures = s.auth_failures;
            w.ReplayedPackets = s.replayed_packets;
            w.RefusedPackets = s.refused_packets;
            w.StaleMessages = s.stale_messages;
            w.PartialsEvicted = s.partials_evicted;
            w.DatagramsUnsent = s.datagrams_unsent;
            w.KernelDrops = s.kernel_drops;
            return w;
        }
    }

    /// <summary>A server's counters (<see cref="KeelServer.Stats"/>), copied from <see cref="KeelNative.keel_server_stats"/>.</summary>
    public struct KeelServerStats
    {
        /// <summary>Connections held now (closing ones included).</summary>
        public ulong Connections;
        /// <summary>Connections made.</summary>
        public ulong ConnectionsCreated;
        /// <summary>Connections removed after they ended.</summary>
        public ulong ConnectionsRemoved;
        /// <summary>Handshake packets received.</summary>
        public ulong Hellos;
        /// <summary>Handshakes refused, whatever the cause (config, full, token, security, admission limits).</summary>
        public ulong HandshakesRefused;
        /// <summary>Of those, for a token (forged, expired, another server or key, replayed).</summary>
        public ulong TokensRefused;
        /// <summary>Of those, for the per-address connection limit.</summary>
        public ulong RefusedAddressLimit;
        /// <summary>Of those, for the per-address handshake rate.</summary>
        public ulong RefusedRateLimit;
        /// <summary>Datagrams dropped as malformed.</summary>
        public ulong Malformed;
        /// <summary>Datagrams dropped: for no known connection.</summary>
        public ulong UnknownConnection;
        /// <summary>Datagrams not sent because the socket buffer was full.</summary>
        public ulong DatagramsUnsent;
        /// <summary>Message pieces refused: the shared receive budget was spent.</summary>
        public ulong BudgetRefused;
        /// <summary>Sends refused: the shared send budget was spent.</summary>
        public ulong SendBudgetRefused;
        /// <summary>Broadcast copies not queued (a connection's send buffer or the send budget was full).</summary>
        public ulong BroadcastRefused;
        /// <summary>Connections ended because the peer acknowledged nothing.</summary>
        public ulong AckTimeouts;
        /// <summary>Messages never acknowledged by connections that were removed.</summary>
        public ulong UndeliveredMessages;
        /// <summary>Datagrams the kernel dropped because the server socket's receive buffer was full, before the server read them (Linux <c>SO_RXQ_OVFL</c>; 0 elsewhere); counted also after STOPPED.</summary>
        public ulong KernelDrops;

        /// <summary>Copies <paramref name="s"/> field by field.</summary>
        public static KeelServerStats CopyFrom(ref KeelNative.keel_server_stats s)
        {
            KeelServerStats w = new KeelServerStats();
            w.Connections = s.connections;
            w.ConnectionsCreated = s.connections_created;
            w.ConnectionsRemoved = s.connections_removed;
            w.Hellos = s.hellos;
            w.HandshakesRefused = s.handshakes_refused;
            w.TokensRefused = s.tokens_refused;
            w.RefusedAddressLimit = s.refused_address_limit;
            w.RefusedRateLimit = s.refused_rate_limit;
            w.Malformed = s.malformed;
            w.UnknownConnection = s.unknown_connection;
            w.DatagramsUnsent = s.datagrams_unsent;
            w.BudgetRefused = s.budget_refused;
            w.SendBudgetRefused = s.send_budget_refused;
            w.BroadcastRefused = s.broadcast_refused;
            w.AckTimeouts = s.ack_timeouts;
            w.UndeliveredMessages = s.undelivered_messages;
            w.KernelDrops = s.kernel_drops;
            return w;
        }
    }

    /// <summary>The stats structs' sizes, passed as <c>out_size</c>.</summary>
    internal static class StatsSize
    {
        /// <summary><c>sizeof(keel_connection_stats)</c>.</summary>
        internal static readonly UIntPtr Connection = new UIntPtr((uint)Marshal.SizeOf(typeof(KeelNative.keel_connection_stats)));
        /// <summary><c>sizeof(keel_server_stats)</c>.</summary>
        internal static readonly UIntPtr Server = new UIntPtr((uint)Marshal.SizeOf(typeof(KeelNative.keel_server_stats)));
    }

    /// <summary>Pins managed arrays for the length of one native call.</summary>
    internal struct Pin : IDisposable
    {
        GCHandle h;

        /// <summary>Pins <paramref name="o"/> (null: nothing).</summary>
        public Pin(object o)
        {
            h = o == null ? default(GCHandle) : GCHandle.Alloc(o, GCHandleType.Pinned);
        }

        /// <summary>The address of element <paramref name="offset"/> of the
        /// pinned byte or uint array (IntPtr.Zero when nothing is pinned).</summary>
        public IntPtr At(int offset, int elementSize)
        {
            return h.IsAllocated ? IntPtr.Add(h.AddrOfPinnedObject(), offset * elementSize) : IntPtr.Zero;
        }

        /// <summary>Unpins.</summary>
        public void Dispose()
        {
            if (h.IsAllocated)
                h.Free();
        }

        /// <summary>Checks <paramref name="data"/>[offset, offset + count) and
        /// returns it as the (pointer, len) pair of a send, pinned in
        /// <paramref name="pin"/>: NULL and 0 for an empty range.</summary>
        internal static IntPtr Bytes(byte[] data, int offset, int count, out Pin pin, out UIntPtr len)
        {
            if (data == null)
                throw new ArgumentNullException("data");
            if (offset < 0 || count < 0 || offset > data.Length - count)
                throw new ArgumentOutOfRangeException("offset/count",
                    "offset " + offset + " and count " + count + " do not fit in data (" + data.Length + " bytes)");
            len = new UIntPtr((uint)count);
            if (count == 0)
            {
                pin = default(Pin);
                return IntPtr.Zero;
            }
            pin = new Pin(data);
            return pin.At(offset, 1);
        }

        /// <summary>A keel_config over <paramref name="channels"/>, whose
        /// kinds stay pinned in <paramref name="pin"/>.</summary>
        internal static KeelNative.keel_config Config(ChannelKind[] channels, out Pin pin)
        {
            if (channels == null)
                throw new ArgumentNullException("channels");
            uint[] kinds = new uint[channels.Length];
            for (int i = 0; i < kinds.Length; i++)
                kinds[i] = (uint)channels[i];
            KeelNative.keel_config cfg = new KeelNative.keel_config();
            pin = new Pin(kinds);
            cfg.channels = pin.At(0, 4);
            cfg.channel_count = new UIntPtr((uint)kinds.Length);
            return cfg;
        }
    }

    /// <summary>A keel-rudp client: one connection to one server, and its
    /// UDP socket. Create it with <see cref="ConnectInsecure"/>,
    /// <see cref="ConnectToken"/> or <see cref="ConnectTokenBytes"/>, call
    /// <see cref="Poll"/> from your loop (timeout 0 each frame), and
    /// <see cref="Dispose"/> it (after <see cref="Close"/> and polling until
    /// Disconnected, for the server to learn why). Use it from one thread at a
    /// time; it adds no locking and starts no threads.</summary>
    public sealed class KeelClient : IDisposable
    {
        readonly KeelClientHandle h;

        KeelClient(KeelClientHandle handle)
        {
            h = handle;
        }

        /// <summary>The native handle, for the raw functions of <see cref="KeelNative"/>.</summary>
        public KeelClientHandle Handle { get { return h; } }

        /// <summary>Connects to <paramref name="serverAddr"/> (<c>IP:port</c>)
        /// in insecure mode: no token, no encryption, no authentication (LAN
        /// tools and tests). Nothing is sent until the first Poll.</summary>
        /// <exception cref="KeelException">KEEL_ERR_ADDRESS, KEEL_ERR_INVALID_ARGUMENT (a channel kind), KEEL_ERR_CONFIG, KEEL_ERR_IO.</exception>
        public static KeelClient ConnectInsecure(ChannelKind[] channels, string serverAddr)
        {
            Pin pin;
            KeelNative.keel_config cfg = Pin.Config(channels, out pin);
            using (pin)
            {
                KeelClientHandle handle;
                KeelException.Check(KeelNative.keel_client_connect_insecure(ref cfg, KeelNative.Utf8z(serverAddr), out handle),
                    "keel_client_connect_insecure");
                return new KeelClient(handle);
            }
        }

        /// <summary>Connects with a connect token's text form (base64url, as
        /// the game's backend hands it out); packets are sealed with its keys.</summary>
        /// <exception cref="KeelException">As <see cref="ConnectInsecure"/>, and KEEL_ERR_TOKEN.</exception>
        public static KeelClient ConnectToken(ChannelKind[] channels, string serverAddr, string tokenText)
        {
            Pin pin;
            KeelNative.keel_config cfg = Pin.Config(channels, out pin);
            using (pin)
            {
                KeelClientHandle handle;
                KeelException.Check(KeelNative.keel_client_connect_token(ref cfg, KeelNative.Utf8z(serverAddr),
                    KeelNative.Utf8z(tokenText), out handle), "keel_client_connect_token");
                return new KeelClient(handle);
            }
        }

        /// <summary>Connects with a connect token's binary form
        /// (<c>ConnectToken::to_bytes</c>), read during the call only.</summary>
        /// <exception cref="KeelException">As <see cref="ConnectToken"/>.</exception>
        public static KeelClient ConnectTokenBytes(ChannelKind[] channels, string serverAddr, byte[] token)
        {
            if (token == null)
                throw new ArgumentNullException("token");
            Pin pin;
            KeelNative.keel_config cfg = Pin.Config(channels, out pin);
            using (pin)
            {
                KeelClientHandle handle;
                KeelException.Check(KeelNative.keel_client_connect_token_bytes(ref cfg, KeelNative.Utf8z(serverAddr),
                    token, new UIntPtr((uint)token.Length), out handle), "keel_client_connect_token_bytes");
                return new KeelClient(handle);
            }
        }

        KeelClientHandle Live()
        {
            if (h.IsClosed)
                throw new ObjectDisposedException("KeelClient");
            return h;
        }

        /// <summary>Queues all of <paramref name="data"/> on
        /// <paramref name="channel"/>; it goes out on the next Poll. The
        /// bytes are copied: reuse the array at once.</summary>
        /// <exception cref="KeelException">KEEL_ERR_UNKNOWN_CHANNEL, KEEL_ERR_MESSAGE_TOO_LARGE, KEEL_ERR_BACKPRESSURE (nothing queued: poll and send again), KEEL_ERR_CLOSED.</exception>
        public void Send(byte channel, byte[] data)
        {
            Send(channel, data, 0, data == null ? 0 : data.Length);
        }

        /// <summary>Queues <paramref name="count"/> bytes of
        /// <paramref name="data"/> from <paramref name="offset"/> on
        /// <paramref name="channel"/> (copied).</summary>
        /// <exception cref="KeelException">As <see cref="Send(byte, byte[])"/>.</exception>
        public void Send(byte channel, byte[] data, int offset, int count)
        {
            KeelClientHandle live = Live();
            Pin pin;
            UIntPtr len;
            IntPtr p = Pin.Bytes(data, offset, count, out pin, out len);
            using (pin)
                KeelException.Check(KeelNative.keel_client_send(live, channel, p, len), "keel_client_send");
        }

        /// <summary>Starts closing with <paramref name="code"/> and
        /// <paramref name="reason"/> (at most 128 UTF-8 bytes are sent; null:
        /// empty). What was queued is flushed first. Poll until the
        /// Disconnected event (Local) before disposing.</summary>
        /// <exception cref="KeelException">KEEL_ERR_INVALID_ARGUMENT, KEEL_ERR_CLOSED.</exception>
        public void Close(ulong code, string reason)
        {
            KeelException.Check(KeelNative.keel_client_close(Live(), code, KeelNative.Utf8z(reason)), "keel_client_close");
        }

        /// <summary>Does the client's work on the calling thread (reads what
        /// arrived, runs due timers, sends what is queued) and returns the
        /// next event in <paramref name="ev"/>, waiting up to
        /// <paramref name="timeoutMs"/> ms for one (0: do not wait, for a
        /// frame loop). Returns false (and a default <paramref name="ev"/>)
        /// when none came. Call it until it returns false: more events may be
        /// waiting. The event is copied out: it stays valid.</summary>
        /// <exception cref="KeelException">KEEL_ERR_IO.</exception>
        public bool Poll(uint timeoutMs, out KeelEvent ev)
        {
            KeelNative.keel_event raw;
            int rc = KeelException.Check(KeelNative.keel_client_poll(Live(), timeoutMs, out raw), "keel_client_poll");
            return KeelEvent.FromPoll(rc, ref raw, out ev);
        }

        /// <summary>The connection's counters and estimates: RTT, loss,
        /// bytes, drops.</summary>
        /// <exception cref="KeelException">Not expected on a live client.</exception>
        public KeelConnectionStats Stats()
        {
            KeelNative.keel_connection_stats raw;
            KeelException.Check(KeelNative.keel_client_get_stats(Live(), out raw, StatsSize.Connection), "keel_client_get_stats");
            return KeelConnectionStats.CopyFrom(ref raw);
        }

        /// <summary>Frees the client and its socket (no close is sent: call
        /// <see cref="Close"/> and poll until Disconnected first). Safe to
        /// call twice; later calls of other methods throw
        /// ObjectDisposedException.</summary>
        public void Dispose()
        {
            h.Dispose();
        }
    }

    /// <summary>A keel-rudp server: its UDP socket and all its connections.
    /// Create it with <see cref="CreateInsecure"/> or
    /// <see cref="CreateToken"/>, call <see cref="Poll"/> from your loop (each
    /// event names its connection), and <see cref="Dispose"/> it. Use it from
    /// one thread at a time; it adds no locking and starts no threads.</summary>
    public sealed class KeelServer : IDisposable
    {
        readonly KeelServerHandle h;

        KeelServer(KeelServerHandle handle)
        {
            h = handle;
        }

        /// <summary>The native handle, for the raw functions of <see cref="KeelNative"/>.</summary>
        public KeelServerHandle Handle { get { return h; } }

        /// <summary>Binds <paramref name="bindAddr"/> (<c>IP:port</c>; port 0
        /// picks one, see <see cref="LocalAddr"/>) in insecure mode: no
        /// tokens, no encryption (LAN tools and tests).</summary>
        /// <exception cref="KeelException">KEEL_ERR_ADDRESS, KEEL_ERR_INVALID_ARGUMENT (a channel kind), KEEL_ERR_CONFIG, KEEL_ERR_IO.</exception>
        public static KeelServer CreateInsecure(ChannelKind[] channels, string bindAddr)
        {
            Pin pin;
            KeelNative.keel_config cfg = Pin.Config(channels, out pin);
            using (pin)
            {
                KeelServerHandle handle;
                KeelException.Check(KeelNative.keel_server_create_insecure(ref cfg, KeelNative.Utf8z(bindAddr), out handle),
                    "keel_server_create_insecure");
                return new KeelServer(handle);
            }
        }

        /// <summary>Binds <paramref name="bindAddr"/>, requiring connect
        /// tokens sealed with <paramref name="tokenKey"/> (32 bytes, shared
        /// with the backend's TokenMinter) and sealing every packet. Tokens
        /// name the address clients reach, so bind that address (0.0.0.0 or
        /// port 0 only suit tests).</summary>
        /// <exception cref="ArgumentException"><paramref name="tokenKey"/> is not 32 bytes.</exception>
        /// <exception cref="KeelException">As <see cref="CreateInsecure"/>.</exception>
        public static KeelServer CreateToken(ChannelKind[] channels, string bindAddr, byte[] tokenKey)
        {
            if (tokenKey == null || tokenKey.Length != 32)
                throw new ArgumentException("tokenKey must be 32 bytes, not " + (tokenKey == null ? "null" : tokenKey.Length.ToString()), "tokenKey");
            Pin pin;
            KeelNative.keel_config cfg = Pin.Config(channels, out pin);
            using (pin)
            {
                KeelServerHandle handle;
                KeelException.Check(KeelNative.keel_server_create_token(ref cfg, KeelNative.Utf8z(bindAddr), tokenKey, out handle),
                    "keel_server_create_token");
                return new KeelServer(handle);
            }
        }

        KeelServerHandle Live()
        {
            if (h.IsClosed)
                throw new ObjectDisposedException("KeelServer");
            return h;
        }

        /// <summary>The bound address as text (<c>127.0.0.1:40123</c>).</summary>
        public string LocalAddr()
        {
            byte[] buf = new byte[64];
            KeelException.Check(KeelNative.keel_server_local_addr(Live(), buf, new UIntPtr((uint)buf.Length)), "keel_server_local_addr");
            int n = Array.IndexOf(buf, (byte)0);
            return Encoding.UTF8.GetString(buf, 0, n < 0 ? buf.Length : n);
        }

        /// <summary>Queues all of <paramref name="data"/> on
        /// <paramref name="channel"/> of <paramref name="connection"/> (a
        /// handle from an event); it goes out on the next Poll (copied).</summary>
        /// <exception cref="KeelException">KEEL_ERR_UNKNOWN_CONNECTION, KEEL_ERR_UNKNOWN_CHANNEL, KEEL_ERR_MESSAGE_TOO_LARGE, KEEL_ERR_BACKPRESSURE, KEEL_ERR_BUDGET_SPENT, KEEL_ERR_CLOSED.</exception>
        public void Send(ulong connection, byte channel, byte[] data)
        {
            Send(connection, channel, data, 0, data == null ? 0 : data.Length);
        }

        /// <summary>Queues <paramref name="count"/> bytes of
        /// <paramref name="data"/> from <paramref name="offset"/> (copied).</summary>
        /// <exception cref="KeelException">As <see cref="Send(ulong, byte, byte[])"/>.</exception>
        public void Send(ulong connection, byte channel, byte[] data, int offset, int count)
        {
            KeelServerHandle live = Live();
            Pin pin;
            UIntPtr len;
            IntPtr p = Pin.Bytes(data, offset, count, out pin, out len);
            using (pin)
                KeelException.Check(KeelNative.keel_server_send(live, connection, channel, p, len), "keel_server_send");
        }

        /// <summary>Starts closing <paramref name="connection"/> with
        /// <paramref name="code"/> and <paramref name="reason"/> (at most 128
        /// UTF-8 bytes sent; null: empty). The client sees both; this server
        /// gets the connection's Disconnected event (Local) once it ends.</summary>
        /// <exception cref="KeelException">KEEL_ERR_UNKNOWN_CONNECTION, KEEL_ERR_INVALID_ARGUMENT.</exception>
        public void Close(ulong connection, ulong code, string reason)
        {
            KeelException.Check(KeelNative.keel_server_close(Live(), connection, code, KeelNative.Utf8z(reason)), "keel_server_close");
        }

        /// <summary>Queues all of <paramref name="data"/> on
        /// <paramref name="channel"/> of every connected connection (not
        /// those handshaking or closing); it goes out on the next Poll
        /// (copied). Returns how many connections got it: one whose send
        /// buffer or the send budget is full is skipped and counted in
        /// <see cref="KeelServerStats.BroadcastRefused"/>.</summary>
        /// <exception cref="KeelException">KEEL_ERR_UNKNOWN_CHANNEL, KEEL_ERR_MESSAGE_TOO_LARGE (nothing queued).</exception>
        public int Broadcast(byte channel, byte[] data)
        {
            return Broadcast(channel, data, 0, data == null ? 0 : data.Length);
        }

        /// <summary>Queues <paramref name="count"/> bytes of
        /// <paramref name="data"/> from <paramref name="offset"/> on every
        /// connected connection (copied); returns how many got it.</summary>
        /// <exception cref="KeelException">As <see cref="Broadcast(byte, byte[])"/>.</exception>
        public int Broadcast(byte channel, byte[] data, int offset, int count)
        {
            KeelServerHandle live = Live();
            Pin pin;
            UIntPtr len;
            IntPtr p = Pin.Bytes(data, offset, count, out pin, out len);
            UIntPtr queued;
            using (pin)
                KeelException.Check(KeelNative.keel_server_broadcast(live, channel, p, len, out queued), "keel_server_broadcast");
            return (int)queued.ToUInt64();
        }

        /// <summary>Stops the server: closes every connection with
        /// <paramref name="code"/> (usually <see cref="KeelCloseCode.Stopped"/>)
        /// and <paramref name="reason"/> (at most 128 UTF-8 bytes sent; null:
        /// empty), flushing what each has queued, and closes connections that
        /// finish a handshake from now on the same way. Keep polling: each
        /// connection's Disconnected (Local) event comes, then one
        /// <see cref="EventKind.Stopped"/> last (at most about 3 s later for
        /// clients that never acknowledge); then Dispose. A second call
        /// changes nothing.</summary>
        /// <exception cref="KeelException">KEEL_ERR_INVALID_ARGUMENT.</exception>
        public void Stop(ulong code, string reason)
        {
            KeelException.Check(KeelNative.keel_server_stop(Live(), code, KeelNative.Utf8z(reason)), "keel_server_stop");
        }

        /// <summary>The server's counters: connections, handshakes and their
        /// refusals, drops.</summary>
        /// <exception cref="KeelException">Not expected on a live server.</exception>
        public KeelServerStats Stats()
        {
            KeelNative.keel_server_stats raw;
            KeelException.Check(KeelNative.keel_server_get_stats(Live(), out raw, StatsSize.Server), "keel_server_get_stats");
            return KeelServerStats.CopyFrom(ref raw);
        }

        /// <summary><paramref name="connection"/>'s counters and estimates
        /// (RTT, loss, bytes, drops).</summary>
        /// <exception cref="KeelException">KEEL_ERR_UNKNOWN_CONNECTION once its Disconnected event was returned.</exception>
        public KeelConnectionStats ConnectionStats(ulong connection)
        {
            KeelNative.keel_connection_stats raw;
            KeelException.Check(KeelNative.keel_server_get_connection_stats(Live(), connection, out raw, StatsSize.Connection),
                "keel_server_get_connection_stats");
            return KeelConnectionStats.CopyFrom(ref raw);
        }

        /// <summary><paramref name="connection"/>'s state: handshaking,
        /// connected (sends are accepted), closing, draining or closed.</summary>
        /// <exception cref="KeelException">KEEL_ERR_UNKNOWN_CONNECTION once its Disconnected event was returned.</exception>
        public ConnectionState ConnectionState(ulong connection)
        {
            uint state;
            KeelException.Check(KeelNative.keel_server_connection_state(Live(), connection, out state), "keel_server_connection_state");
            return (ConnectionState)state;
        }

        /// <summary>Connections the server holds now, closing ones included.</summary>
        public int ConnectionCount()
        {
            return (int)KeelNative.keel_server_connection_count(Live()).ToUInt64();
        }

        /// <summary>As <see cref="KeelClient.Poll"/>, for all of the server's
        /// connections: accepts handshakes and returns the next event of any
        /// connection (<see cref="KeelEvent.Connection"/> names it), copied
        /// out. After <see cref="Stop"/>, one <see cref="EventKind.Stopped"/>
        /// comes last; later polls return false.</summary>
        /// <exception cref="KeelException">KEEL_ERR_IO.</exception>
        public bool Poll(uint timeoutMs, out KeelEvent ev)
        {
            KeelNative.keel_event raw;
            int rc = KeelException.Check(KeelNative.keel_server_poll(Live(), timeoutMs, out raw), "keel_server_poll");
            return KeelEvent.FromPoll(rc, ref raw, out ev);
        }

        /// <summary>Frees the server, its socket and all its connections
        /// (none is closed: close each and poll first for clients to learn
        /// why). Safe to call twice.</summary>
        public void Dispose()
        {
            h.Dispose();
        }
    }

    #endregion
}
