// A server and a client of the keel-rudp C API through the C# binding
// (bindings/csharp/KeelRudp.cs, P/Invoke) in one process, over loopback,
// insecure mode: the client connects and sends a reliable message holding a
// NUL byte, the server echoes it, the client receives it, the server closes
// the connection with a code and reason, the client sees both and the server
// sees its LOCAL disconnect. After the echo, the stats of the client, of the
// server's connection and of the server: an RTT sample was taken, bytes went
// both ways, one message was delivered each way, one connection was made
// (and removed after its close). Also: the structs' layout on a 64-bit process,
// errors as KeelException with the code and keel_error_message's text, an
// event's bytes intact after later polls (copied out), and a disposed client
// refusing calls. Prints each step; exits 1 with what failed, and gives up
// after 5 s.
//
// Run by scripts/test.sh (Mono):
//   mcs -out:target/c-api/Loopback.exe crates/rudp-ffi/bindings/csharp/KeelRudp.cs \
//     crates/rudp-ffi/tests/csharp/Loopback.cs
//   LD_LIBRARY_PATH=target/debug mono target/c-api/Loopback.exe
//
// Insecure mode; tests/csharp/Features.cs covers token mode, broadcast, stop
// and connection states.

using System;
using System.Diagnostics;
using System.Runtime.InteropServices;
using System.Text;
using Keel.Rudp;

class Failed : Exception
{
    public Failed(string what) : base(what) { }
}

static class Loopback
{
    const ulong CloseCode = 4242;
    const string CloseReason = "server shutting down";
    const double DeadlineS = 5.0;
    const ulong InitialRttUs = 333000; // Config::initial_rtt's default: the estimate before a sample
    static readonly byte[] Message = Encoding.UTF8.GetBytes("hello from C#\0with a NUL byte");

    static void Check(bool cond, string what)
    {
        if (!cond)
            throw new Failed(what);
    }

    static KeelException ExpectError(int code, string what, Action call)
    {
        try
        {
            call();
        }
        catch (KeelException e)
        {
            Check(e.Code == code, what + ": code " + e.Code + ", wanted " + code);
            Check(!string.IsNullOrEmpty(e.KeelMessage), what + ": empty message");
            Check(e.KeelMessage == KeelNative.ErrorMessage(code), what + ": message \"" + e.KeelMessage + "\"");
            return e;
        }
        throw new Failed(what + ": no KeelException (wanted " + code + ")");
    }

    static bool Same(byte[] a, byte[] b)
    {
        if (a == null || b == null || a.Length != b.Length)
            return false;
        for (int i = 0; i < a.Length; i++)
            if (a[i] != b[i])
                return false;
        return true;
    }

    static string Show(byte[] b)
    {
        return "\"" + Encoding.UTF8.GetString(b).Replace("\0", "\\0") + "\"";
    }

    // The layout keel_rudp.h gives on a 64-bit (LP64 or LLP64) target:
    // a mismatch here means the C# structs no longer match the header.
    static void CheckLayout()
    {
        if (IntPtr.Size != 8)
        {
            Console.WriteLine("layout: skipped (a " + IntPtr.Size * 8 + "-bit process; the offsets checked are 64-bit)");
            return;
        }
        Type c = typeof(KeelNative.keel_config);
        Check(Marshal.SizeOf(c) == 16, "sizeof(keel_config) " + Marshal.SizeOf(c) + ", wanted 16");
        Check(Marshal.OffsetOf(c, "channel_count").ToInt64() == 8, "keel_config.channel_count offset");
        Type e = typeof(KeelNative.keel_event);
        string[] fields = { "kind", "connection", "channel", "data", "len", "disconnect", "code", "reason", "reason_len" };
        long[] offsets = { 0, 8, 16, 24, 32, 40, 48, 56, 64 };
        for (int i = 0; i < fields.Length; i++)
        {
            long got = Marshal.OffsetOf(e, fields[i]).ToInt64();
            Check(got == offsets[i], "keel_event." + fields[i] + " at offset " + got + ", wanted " + offsets[i]);
        }
        Check(Marshal.SizeOf(e) == 72, "sizeof(keel_event) " + Marshal.SizeOf(e) + ", wanted 72");
        // The stats structs: every field 8 bytes, in the header's order.
        CheckEightByteFields(typeof(KeelNative.keel_connection_stats), new string[] {
            "rtt_us", "rtt_var_us", "rtt_min_us", "rtt_latest_us", "loss_rate", "packets_sent",
            "packets_received", "packets_lost", "retransmissions", "bytes_sent", "bytes_received",
            "messages_delivered", "send_queued_bytes", "bytes_in_flight", "congestion_window",
            "malformed_packets", "duplicate_packets", "auth_failures", "replayed_packets",
            "refused_packets", "stale_messages", "partials_evicted", "datagrams_unsent", "kernel_drops" }, 192);
        Check(typeof(KeelNative.keel_connection_stats).GetField("loss_rate").FieldType == typeof(double),
            "keel_connection_stats.loss_rate is not a double");
        CheckEightByteFields(typeof(KeelNative.keel_server_stats), new string[] {
            "connections", "connections_created", "connections_removed", "hellos", "handshakes_refused",
            "tokens_refused", "refused_address_limit", "refused_rate_limit", "malformed",
            "unknown_connection", "datagrams_unsent", "budget_refused", "send_budget_refused",
            "broadcast_refused", "ack_timeouts", "undelivered_messages", "kernel_drops" }, 136);
        Console.WriteLine("layout: keel_config 16 bytes, keel_event 72 bytes, keel_connection_stats 192 bytes,"
            + " keel_server_stats 136 bytes, offsets as in keel_rudp.h");
    }

    static void CheckEightByteFields(Type t, string[] fields, int size)
    {
        Check(t.GetFields().Length == fields.Length, t.Name + ": " + t.GetFields().Length + " fields, wanted " + fields.Length);
        for (int i = 0; i < fields.Length; i++)
        {
            long got = Marshal.OffsetOf(t, fields[i]).ToInt64();
            Check(got == 8 * i, t.Name + "." + fields[i] + " at offset " + got + ", wanted " + 8 * i);
        }
        Check(Marshal.SizeOf(t) == size, "sizeof(" + t.Name + ") " + Marshal.SizeOf(t) + ", wanted " + size);
    }

    // The client just received the echo: both ends measured an RTT, sent
    // bytes, and delivered the one message.
    static void CheckStatsAfterEcho(KeelClient client, KeelServer server, ulong conn)
    {
        KeelConnectionStats cs = client.Stats();
        Check(cs.RttUs > 0, "client stats: RttUs " + cs.RttUs);
        Check(cs.RttLatestUs != InitialRttUs, "client stats: no RTT sample (latest is the initial 333 ms)");
        Check(cs.BytesSent > (ulong)Message.Length, "client stats: BytesSent " + cs.BytesSent);
        Check(cs.BytesReceived > (ulong)Message.Length, "client stats: BytesReceived " + cs.BytesReceived);
        Check(cs.MessagesDelivered == 1, "client stats: MessagesDelivered " + cs.MessagesDelivered);
        Check(cs.PacketsSent > 0 && cs.PacketsReceived > 0,
            "client stats: packets " + cs.PacketsSent + " sent, " + cs.PacketsReceived + " received");
        Check(cs.LossRate >= 0.0 && cs.LossRate <= 1.0, "client stats: LossRate " + cs.LossRate);
        Check(cs.MalformedPackets == 0 && cs.AuthFailures == 0, "client stats: drops");
        KeelConnectionStats ss = server.ConnectionStats(conn);
        Check(ss.RttUs > 0, "server connection stats: RttUs " + ss.RttUs);
        Check(ss.BytesSent > (ulong)Message.Length, "server connection stats: BytesSent " + ss.BytesSent);
        Check(ss.MessagesDelivered == 1, "server connection stats: MessagesDelivered " + ss.MessagesDelivered);
        Check(ss.DatagramsUnsent == 0, "server connection stats: DatagramsUnsent " + ss.DatagramsUnsent);
        Console.WriteLine("client stats: rtt " + cs.RttUs + " us (latest " + cs.RttLatestUs + "), " + cs.BytesSent
            + " bytes sent, " + cs.BytesReceived + " received, " + cs.MessagesDelivered + " message delivered;"
            + " server's connection: rtt " + ss.RttUs + " us, " + ss.BytesSent + " bytes sent, "
            + ss.MessagesDelivered + " delivered");
    }

    static void Run(Stopwatch clock)
    {
        ChannelKind[] channels = { ChannelKind.ReliableOrdered, ChannelKind.Unreliable };

        CheckLayout();

        // Errors: codes plus keel_error_message's text.
        Check(KeelNative.ErrorMessage(KeelNative.KEEL_OK) == "ok",
            "message of KEEL_OK: \"" + KeelNative.ErrorMessage(KeelNative.KEEL_OK) + "\"");
        KeelException err = ExpectError(KeelNative.KEEL_ERR_ADDRESS, "connect to \"not an address\"",
            () => KeelClient.ConnectInsecure(channels, "not an address").Dispose());
        ExpectError(KeelNative.KEEL_ERR_INVALID_ARGUMENT, "server with channel kind 99",
            () => KeelServer.CreateInsecure(new ChannelKind[] { (ChannelKind)99 }, "127.0.0.1:0").Dispose());
        ExpectError(KeelNative.KEEL_ERR_NULL, "connect to a null address",
            () => KeelClient.ConnectInsecure(channels, null).Dispose());
        Console.WriteLine("error codes: ok (e.g. " + err.Message + ")");

        using (KeelServer server = KeelServer.CreateInsecure(channels, "127.0.0.1:0"))
        {
            string addr = server.LocalAddr();
            Console.WriteLine("server bound to " + addr);
            KeelClient client = KeelClient.ConnectInsecure(channels, addr);
            try
            {
                ulong conn = 0;
                bool serverConnected = false, clientConnected = false, echoed = false, gotEcho = false;
                bool closing = false, clientClosed = false, serverClosed = false;
                byte[] echo = null;
                KeelEvent ev;
                while (!(clientClosed && serverClosed))
                {
                    Check(clock.Elapsed.TotalSeconds < DeadlineS, "gave up after " + DeadlineS + " s (server connected "
                        + serverConnected + ", client connected " + clientConnected + ", echoed " + echoed
                        + ", got echo " + gotEcho + ", closing " + closing + ", client closed " + clientClosed
                        + ", server closed " + serverClosed + ")");

                    while (server.Poll(0, out ev))
                    {
                        if (ev.Kind == EventKind.Connected)
                        {
                            Check(ev.Connection != 0, "connection handle 0");
                            conn = ev.Connection;
                            serverConnected = true;
                            Console.WriteLine("server: connection " + conn + " connected");
                        }
                        else if (ev.Kind == EventKind.Message)
                        {
                            Check(ev.Connection == conn, "message from an unknown connection " + ev.Connection);
                            Console.WriteLine("server: " + ev.Data.Length + " bytes on channel " + ev.Channel + ", echoing");
                            server.Send(ev.Connection, (byte)ev.Channel, ev.Data);
                            echoed = true;
                        }
                        else if (ev.Kind == EventKind.Disconnected)
                        {
                            Check(ev.Connection == conn, "disconnect of an unknown connection " + ev.Connection);
                            Check(ev.Disconnect == DisconnectKind.Local, "server disconnect kind " + ev.Disconnect);
                            Check(ev.Code == CloseCode, "server close code " + ev.Code + ", wanted " + CloseCode);
                            Console.WriteLine("server: connection " + ev.Connection + " ended (local close, code "
                                + ev.Code + ", \"" + ev.Reason + "\")");
                            serverClosed = true;
                        }
                        else
                        {
                            throw new Failed("unexpected server event " + ev);
                        }
                    }

                    while (!clientClosed && client.Poll(1, out ev))
                    {
                        if (ev.Kind == EventKind.Connected)
                        {
                            clientConnected = true;
                            // Sent from the middle of a larger array: the offset/count path.
                            byte[] padded = new byte[Message.Length + 6];
                            for (int i = 0; i < padded.Length; i++)
                                padded[i] = (byte)'#';
                            Buffer.BlockCopy(Message, 0, padded, 3, Message.Length);
                            Console.WriteLine("client: connected, sending " + Show(Message) + " on channel 0"
                                + " (bytes 3.." + (3 + Message.Length) + " of a " + padded.Length + "-byte array)");
                            client.Send(0, padded, 3, Message.Length);
                            bool outOfRange = false;
                            try
                            {
                                client.Send(0, padded, 3, padded.Length);
                            }
                            catch (ArgumentOutOfRangeException)
                            {
                                outOfRange = true;
                            }
                            Check(outOfRange, "client send past the array's end: no ArgumentOutOfRangeException");
                            ExpectError(KeelNative.KEEL_ERR_UNKNOWN_CHANNEL, "client send on channel 7",
                                () => client.Send(7, new byte[] { 1 }));
                        }
                        else if (ev.Kind == EventKind.Message)
                        {
                            Check(ev.Channel == 0, "echo on channel " + ev.Channel);
                            Check(Same(ev.Data, Message), "echo differs: " + Show(ev.Data));
                            Console.WriteLine("client: echo received (" + ev.Data.Length + " bytes): " + Show(ev.Data));
                            echo = ev.Data;
                            gotEcho = true;
                            CheckStatsAfterEcho(client, server, conn);
                        }
                        else if (ev.Kind == EventKind.Disconnected)
                        {
                            Check(gotEcho, "disconnected before the echo");
                            Check(ev.Disconnect == DisconnectKind.Remote, "client disconnect kind " + ev.Disconnect);
                            Check(ev.Code == CloseCode, "client close code " + ev.Code + ", wanted " + CloseCode);
                            Check(ev.Reason == CloseReason, "client close reason \"" + ev.Reason + "\", wanted \"" + CloseReason + "\"");
                            Console.WriteLine("client: disconnected by the server, code " + ev.Code + ", reason \"" + ev.Reason + "\"");
                            clientClosed = true;
                        }
                        else
                        {
                            throw new Failed("unexpected client event " + ev);
                        }
                    }

                    if (gotEcho && !closing)
                    {
                        server.Close(conn, CloseCode, CloseReason);
                        Console.WriteLine("server: closing connection " + conn + " (code " + CloseCode + ", \"" + CloseReason + "\")");
                        closing = true;
                    }
                }

                KeelServerStats st = server.Stats();
                Check(st.ConnectionsCreated == 1, "server stats: ConnectionsCreated " + st.ConnectionsCreated);
                Check(st.Connections == 0 && server.ConnectionCount() == 0,
                    "server stats: " + st.Connections + " connections after the close");
                Check(st.ConnectionsRemoved == 1, "server stats: ConnectionsRemoved " + st.ConnectionsRemoved);
                Check(st.Hellos >= 1 && st.HandshakesRefused == 0,
                    "server stats: hellos " + st.Hellos + ", refused " + st.HandshakesRefused);
                Console.WriteLine("server stats: " + st.ConnectionsCreated + " connection made, " + st.ConnectionsRemoved
                    + " removed, " + st.Hellos + " hello(s), none refused");
                ExpectError(KeelNative.KEEL_ERR_UNKNOWN_CONNECTION, "connection stats after its close",
                    () => server.ConnectionStats(conn));

                // The echo was copied out: later polls did not change it.
                Check(Same(echo, Message), "the echo's bytes changed after later polls");
                KeelException e = null;
                try
                {
                    server.Send(conn, 0, new byte[] { 1 });
                }
                catch (KeelException x)
                {
                    e = x;
                }
                Check(e != null, "server send after close: no KeelException");
                Check(e.Code == KeelNative.KEEL_ERR_UNKNOWN_CONNECTION || e.Code == KeelNative.KEEL_ERR_CLOSED,
                    "server send after close: " + e.Message);
                Console.WriteLine("server: send after close refused (" + e.Message + ")");
            }
            finally
            {
                client.Dispose();
            }

            // A disposed client refuses calls; Dispose twice is harmless.
            client.Dispose();
            bool refused = false;
            try
            {
                client.Send(0, Message);
            }
            catch (ObjectDisposedException)
            {
                refused = true;
            }
            Check(refused, "send on a disposed client: no ObjectDisposedException");
            Console.WriteLine("client: disposed; calls after Dispose throw ObjectDisposedException");
        }
    }

    static int Main()
    {
        Stopwatch clock = Stopwatch.StartNew();
        try
        {
            Run(clock);
        }
        catch (Failed e)
        {
            Console.Error.WriteLine("Loopback.cs: FAILED: " + e.Message);
            return 1;
        }
        catch (KeelException e)
        {
            Console.Error.WriteLine("Loopback.cs: FAILED: " + e.Message);
            return 1;
        }
        catch (DllNotFoundException e)
        {
            Console.Error.WriteLine("Loopback.cs: FAILED: " + e.Message
                + " (build it with cargo build -p keel-rudp-ffi and run with LD_LIBRARY_PATH=target/debug)");
            return 1;
        }
        Console.WriteLine("Loopback.cs: all passed in " + clock.ElapsedMilliseconds + " ms");
        return 0;
    }
}
