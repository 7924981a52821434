// The server calls beyond a single echo, and token mode, through the C#
// binding (bindings/csharp/KeelRudp.cs, P/Invoke) in one process over
// loopback:
//
// * the binding against include/keel_rudp.h: every KEEL_* constant of the
//   header is a KeelNative constant with its value (and no other), every
//   struct has the header's fields in its order, every function is imported
//   with as many parameters (and none that the header lacks);
// * broadcast, stop, connection state and count (insecure mode): two clients
//   connect; the server holds 2 connections, both Connected; a broadcast
//   reaches both and returns 2; after Stop with a reason, both connections
//   are Closing, a broadcast reaches none, both clients see Remote,
//   KeelCloseCode.Stopped and the reason, the server sees both Disconnected
//   (Local, the same code) and then Stopped last, after which it holds none,
//   the handles name nothing and polls return nothing;
// * token mode: a token server (KeelServer.CreateToken with a random 32-byte
//   key) on 127.0.0.1:0; tokens for its address are minted with the Rust
//   example mint_token (KEEL_TOKEN_KEY = the key in hex); a client connecting
//   with the token's text, and one with its bytes (the text is base64url of
//   them, without padding: docs/security.md), each get their message echoed;
//   a token sealed with another key is refused (Remote,
//   KeelCloseCode.RefuseToken), the server sees no event and counts it in
//   TokensRefused.
//
// Prints each step; exits 1 with what failed, and gives up after 5 s.
//
// Run by scripts/test.sh (Mono), after cargo build -p keel-rudp-ffi and
// cargo build -p keel-rudp --example mint_token:
//   mcs -out:target/c-api/Features.exe crates/rudp-ffi/bindings/csharp/KeelRudp.cs \
//     crates/rudp-ffi/tests/csharp/Features.cs
//   LD_LIBRARY_PATH=target/debug mono target/c-api/Features.exe \
//     crates/rudp-ffi/include/keel_rudp.h target/debug/examples/mint_token

using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Reflection;
using System.Runtime.InteropServices;
using System.Security.Cryptography;
using System.Text;
using System.Text.RegularExpressions;
using Keel.Rudp;

class Failed : Exception
{
    public Failed(string what) : base(what) { }
}

static class Features
{
    const double DeadlineS = 5.0;
    const int Server = -1; // "who" of a server event in Pump's list
    const string StopReason = "server going down for maintenance";
    static readonly ChannelKind[] Channels = { ChannelKind.ReliableOrdered, ChannelKind.Unreliable };
    static Stopwatch clock;

    static void Check(bool cond, string what)
    {
        if (!cond)
            throw new Failed(what);
    }

    static void ExpectError(int code, string what, Action call)
    {
        try
        {
            call();
        }
        catch (KeelException e)
        {
            Check(e.Code == code, what + ": code " + e.Code + ", wanted " + code);
            return;
        }
        throw new Failed(what + ": no KeelException (wanted " + code + ")");
    }

    static string Show(List<KeyValuePair<int, KeelEvent>> seen)
    {
        return string.Join(", ", seen.Select(p => (p.Key == Server ? "server" : "client " + p.Key) + ": " + p.Value).ToArray());
    }

    // Polls the server and every client (1 ms waits) until done(seen);
    // returns the events as (who, event) in the order they came, who being
    // Server or the client's index.
    static List<KeyValuePair<int, KeelEvent>> Pump(KeelServer server, KeelClient[] clients,
        Func<List<KeyValuePair<int, KeelEvent>>, bool> done, string what)
    {
        List<KeyValuePair<int, KeelEvent>> seen = new List<KeyValuePair<int, KeelEvent>>();
        KeelEvent ev;
        while (!done(seen))
        {
            Check(clock.Elapsed.TotalSeconds < DeadlineS, "gave up after " + DeadlineS + " s: " + what
                + " (events so far: " + Show(seen) + ")");
            while (server.Poll(0, out ev))
                seen.Add(new KeyValuePair<int, KeelEvent>(Server, ev));
            for (int i = 0; i < clients.Length; i++)
                while (clients[i].Poll(1, out ev))
                    seen.Add(new KeyValuePair<int, KeelEvent>(i, ev));
        }
        return seen;
    }

    static List<KeelEvent> Of(List<KeyValuePair<int, KeelEvent>> seen, int who, EventKind kind)
    {
        return seen.Where(p => p.Key == who && p.Value.Kind == kind).Select(p => p.Value).ToList();
    }

    static bool Same(byte[] a, byte[] b)
    {
        return a != null && b != null && a.SequenceEqual(b);
    }

    static void BindingMatchesHeader(string headerPath)
    {
        string text = File.ReadAllText(headerPath);
        // Constants: the header's, with their values, and no others.
        MatchCollection defines = Regex.Matches(text, @"^#define (KEEL_\w+) (-?\d+)$", RegexOptions.Multiline);
        Check(defines.Count > 40, defines.Count + " constants parsed from " + headerPath);
        HashSet<string> names = new HashSet<string>();
        foreach (Match m in defines)
        {
            string name = m.Groups[1].Value;
            names.Add(name);
            FieldInfo f = typeof(KeelNative).GetField(name, BindingFlags.Public | BindingFlags.Static);
            Check(f != null && f.IsLiteral, "KeelNative." + name + " is missing");
            long got = Convert.ToInt64(f.GetRawConstantValue());
            Check(got == long.Parse(m.Groups[2].Value), "KeelNative." + name + " is " + got + ", the header's is " + m.Groups[2].Value);
        }
        foreach (FieldInfo f in typeof(KeelNative).GetFields(BindingFlags.Public | BindingFlags.Static))
            if (f.IsLiteral && f.Name.StartsWith("KEEL_"))
                Check(names.Contains(f.Name), "KeelNative." + f.Name + " is not in the header");

        string code = Regex.Replace(text, @"/\*.*?\*/", "", RegexOptions.Singleline);
        code = Regex.Replace(code, @"//[^\n]*", "");
        // Structs: the header's fields, in its order (by offset here).
        MatchCollection structs = Regex.Matches(code, @"typedef struct (\w+) \{(.*?)\} \1;", RegexOptions.Singleline);
        Check(structs.Count == 4, structs.Count + " structs parsed from " + headerPath);
        foreach (Match m in structs)
        {
            string name = m.Groups[1].Value;
            Type t = typeof(KeelNative).GetNestedType(name);
            Check(t != null, "KeelNative." + name + " is missing");
            string[] want = m.Groups[2].Value.Split(';').Select(f => f.Trim()).Where(f => f.Length > 0)
                .Select(f => Regex.Match(f, @"(\w+)$").Groups[1].Value).ToArray();
            string[] got = t.GetFields().OrderBy(f => Marshal.OffsetOf(t, f.Name).ToInt64()).Select(f => f.Name).ToArray();
            Check(want.SequenceEqual(got), name + " fields: header " + string.Join(" ", want) + "; binding " + string.Join(" ", got));
        }
        // Functions: each imported, with as many parameters.
        MatchCollection functions = Regex.Matches(code, @"^[\w ]+?\**\s*\b(keel_\w+)\(([^)]*)\);", RegexOptions.Multiline);
        Check(functions.Count > 20, functions.Count + " functions parsed from " + headerPath);
        HashSet<string> fnames = new HashSet<string>();
        foreach (Match m in functions)
        {
            string name = m.Groups[1].Value;
            fnames.Add(name);
            MethodInfo mi = typeof(KeelNative).GetMethod(name, BindingFlags.Public | BindingFlags.Static);
            Check(mi != null, "KeelNative." + name + " is not imported");
            int want = m.Groups[2].Value.Split(',').Count(a => a.Trim().Length > 0);
            Check(mi.GetParameters().Length == want, name + ": " + mi.GetParameters().Length + " parameters, the header has " + want);
        }
        foreach (MethodInfo mi in typeof(KeelNative).GetMethods(BindingFlags.Public | BindingFlags.Static))
            if ((mi.Attributes & MethodAttributes.PinvokeImpl) != 0)
                Check(fnames.Contains(mi.Name), "KeelNative." + mi.Name + " is imported but not in the header");
        Console.WriteLine("binding vs keel_rudp.h: " + defines.Count + " constants, " + structs.Count + " structs, "
            + functions.Count + " functions: all match");
    }

    static void BroadcastStopState()
    {
        using (KeelServer server = KeelServer.CreateInsecure(Channels, "127.0.0.1:0"))
        {
            string addr = server.LocalAddr();
            KeelClient[] clients = { KeelClient.ConnectInsecure(Channels, addr), KeelClient.ConnectInsecure(Channels, addr) };
            try
            {
                var seen = Pump(server, clients, s => Of(s, Server, EventKind.Connected).Count == 2
                    && Of(s, 0, EventKind.Connected).Count == 1 && Of(s, 1, EventKind.Connected).Count == 1,
                    "two clients connecting");
                ulong[] conns = Of(seen, Server, EventKind.Connected).Select(e => e.Connection).ToArray();
                Check(conns[0] != conns[1] && conns[0] != 0 && conns[1] != 0, "connection handles " + conns[0] + ", " + conns[1]);
                Check(server.ConnectionCount() == 2, "ConnectionCount " + server.ConnectionCount());
                foreach (ulong c in conns)
                    Check(server.ConnectionState(c) == ConnectionState.Connected, "connection " + c + " " + server.ConnectionState(c));
                Console.WriteLine("server: 2 connections " + conns[0] + ", " + conns[1] + ", both Connected");

                byte[] msg = Encoding.UTF8.GetBytes("to everyone");
                int n = server.Broadcast(0, msg);
                Check(n == 2, "Broadcast returned " + n + ", wanted 2");
                seen = Pump(server, clients, s => Of(s, 0, EventKind.Message).Count > 0 && Of(s, 1, EventKind.Message).Count > 0,
                    "the broadcast arriving");
                for (int i = 0; i < 2; i++)
                {
                    List<KeelEvent> got = Of(seen, i, EventKind.Message);
                    Check(got.Count == 1 && Same(got[0].Data, msg) && got[0].Channel == 0, "client " + i + " got " + Show(seen));
                }
                ExpectError(KeelNative.KEEL_ERR_UNKNOWN_CHANNEL, "broadcast on channel 9", () => server.Broadcast(9, msg));
                Console.WriteLine("server: broadcast queued for " + n + "; both clients received it");

                server.Stop(KeelCloseCode.Stopped, StopReason);
                foreach (ulong c in conns)
                    Check(server.ConnectionState(c) == ConnectionState.Closing,
                        "connection " + c + " " + server.ConnectionState(c) + " after Stop, wanted Closing");
                n = server.Broadcast(0, Encoding.UTF8.GetBytes("too late"));
                Check(n == 0, "Broadcast after Stop returned " + n + ", wanted 0");
                server.Stop(KeelCloseCode.Stopped, "a second stop changes nothing");
                Console.WriteLine("server: stopped; both connections Closing, a broadcast now reaches 0");

                seen = Pump(server, clients, s => Of(s, Server, EventKind.Stopped).Count > 0
                    && Of(s, 0, EventKind.Disconnected).Count > 0 && Of(s, 1, EventKind.Disconnected).Count > 0,
                    "the stop reaching both clients and Stopped");
                for (int i = 0; i < 2; i++)
                {
                    List<KeelEvent> d = Of(seen, i, EventKind.Disconnected);
                    Check(d.Count == 1, "client " + i + ": " + d.Count + " Disconnected events");
                    Check(d[0].Disconnect == DisconnectKind.Remote, "client " + i + " disconnect " + d[0].Disconnect);
                    Check(d[0].Code == KeelCloseCode.Stopped, "client " + i + " close code " + d[0].Code + ", wanted " + KeelCloseCode.Stopped);
                    Check(d[0].Reason == StopReason, "client " + i + " reason \"" + d[0].Reason + "\"");
                    Check(Of(seen, i, EventKind.Message).Count == 0, "client " + i + " received the broadcast sent after Stop");
                }
                Console.WriteLine("clients: both disconnected by the server (Remote, KeelCloseCode.Stopped, \"" + StopReason + "\")");
                List<KeelEvent> sev = seen.Where(p => p.Key == Server).Select(p => p.Value).ToList();
                Check(sev.Count == 3 && sev[0].Kind == EventKind.Disconnected && sev[1].Kind == EventKind.Disconnected
                    && sev[2].Kind == EventKind.Stopped, "server events after Stop: " + Show(seen) + "; wanted 2 Disconnected then Stopped");
                for (int i = 0; i < 2; i++)
                    Check(sev[i].Disconnect == DisconnectKind.Local && sev[i].Code == KeelCloseCode.Stopped, "server " + sev[i]);
                Check(sev.Take(2).Select(e => e.Connection).OrderBy(c => c).SequenceEqual(conns.OrderBy(c => c)),
                    "server disconnects name " + sev[0].Connection + ", " + sev[1].Connection);
                Check(sev[2].Connection == 0, "Stopped names connection " + sev[2].Connection);
                Console.WriteLine("server: both connections Disconnected (Local, KeelCloseCode.Stopped), then Stopped last");

                Check(server.ConnectionCount() == 0, "ConnectionCount " + server.ConnectionCount() + " after Stopped");
                foreach (ulong c in conns)
                    ExpectError(KeelNative.KEEL_ERR_UNKNOWN_CONNECTION, "state of " + c + " after Stopped", () => server.ConnectionState(c));
                KeelEvent ev;
                for (int i = 0; i < 3; i++)
                    Check(!server.Poll(1, out ev), "Poll after Stopped returned " + ev);
                Console.WriteLine("server: holds no connection after Stopped; handles name nothing; polls return nothing");
            }
            finally
            {
                foreach (KeelClient c in clients)
                    c.Dispose();
            }
        }
    }

    static string Hex(byte[] b)
    {
        return string.Concat(b.Select(x => x.ToString("x2")).ToArray());
    }

    // A token text for addr sealed with key, from the mint_token example.
    static string Mint(string mintToken, byte[] key, string addr, ulong clientId)
    {
        ProcessStartInfo psi = new ProcessStartInfo(mintToken, addr + " " + clientId + " 30");
        psi.UseShellExecute = false;
        psi.RedirectStandardOutput = true;
        psi.RedirectStandardError = true;
        psi.EnvironmentVariables["KEEL_TOKEN_KEY"] = Hex(key);
        using (Process p = Process.Start(psi))
        {
            string stdout = p.StandardOutput.ReadToEnd();
            string stderr = p.StandardError.ReadToEnd();
            Check(p.WaitForExit((int)(DeadlineS * 1000)), "mint_token did not exit");
            Check(p.ExitCode == 0, "mint_token exited " + p.ExitCode + ": " + stderr.Trim());
            return stdout.Trim();
        }
    }

    // The token's binary form: its text is base64url without padding.
    static byte[] TokenBytes(string text)
    {
        string b64 = text.Replace('-', '+').Replace('_', '/');
        return Convert.FromBase64String(b64 + new string('=', (4 - b64.Length % 4) % 4));
    }

    // Polls until client connected, sent msg, and got it echoed.
    static void Echo(KeelServer server, KeelClient client, byte[] msg, string what)
    {
        bool sent = false, echoed = false;
        var seen = Pump(server, new[] { client }, s =>
        {
            foreach (var p in s)
            {
                if (p.Key == 0 && p.Value.Kind == EventKind.Disconnected)
                    throw new Failed(what + ": client disconnected: " + p.Value);
                if (p.Key == 0 && p.Value.Kind == EventKind.Connected && !sent)
                {
                    client.Send(0, msg);
                    sent = true;
                }
                if (p.Key == Server && p.Value.Kind == EventKind.Message && !echoed)
                {
                    server.Send(p.Value.Connection, (byte)p.Value.Channel, p.Value.Data);
                    echoed = true;
                }
            }
            return Of(s, 0, EventKind.Message).Count > 0;
        }, what);
        List<KeelEvent> got = Of(seen, 0, EventKind.Message);
        Check(got.Count == 1 && Same(got[0].Data, msg), what + ": echo " + Show(seen));
    }

    static void TokenMode(string mintToken)
    {
        byte[] key = new byte[32];
        RandomNumberGenerator.Create().GetBytes(key);
        byte[] other = key.Select(b => (byte)(b ^ 0xFF)).ToArray();
        List<KeelClient> clients = new List<KeelClient>();
        using (KeelServer server = KeelServer.CreateToken(Channels, "127.0.0.1:0", key))
        {
            try
            {
                string addr = server.LocalAddr();
                Console.WriteLine("token server bound to " + addr);

                string text = Mint(mintToken, key, addr, 2001);
                clients.Add(KeelClient.ConnectToken(Channels, addr, text));
                Echo(server, clients[0], Encoding.UTF8.GetBytes("sealed, from a token's text"), "token text");
                Console.WriteLine("client (token text, " + text.Length + " characters): connected, message echoed");

                byte[] raw = TokenBytes(Mint(mintToken, key, addr, 2002));
                Check(raw.Length > 4 && raw[0] == 'K' && raw[1] == 'R' && raw[2] == 'T' && raw[3] == 1, "token bytes do not start KRT 1");
                clients.Add(KeelClient.ConnectTokenBytes(Channels, addr, raw));
                Echo(server, clients[1], Encoding.UTF8.GetBytes("sealed, from a token's bytes"), "token bytes");
                Console.WriteLine("client (token bytes, " + raw.Length + " bytes): connected, message echoed");

                Check(server.Stats().TokensRefused == 0, "TokensRefused " + server.Stats().TokensRefused + " before the forged token");
                KeelClient forged = KeelClient.ConnectToken(Channels, addr, Mint(mintToken, other, addr, 2003));
                clients.Add(forged);
                var seen = Pump(server, new[] { forged }, s => Of(s, 0, EventKind.Disconnected).Count > 0,
                    "the token of another key being refused");
                KeelEvent d = Of(seen, 0, EventKind.Disconnected)[0];
                Check(Of(seen, 0, EventKind.Connected).Count == 0, "client with another key's token connected");
                Check(d.Disconnect == DisconnectKind.Remote, "refused: disconnect " + d.Disconnect);
                Check(d.Code == KeelCloseCode.RefuseToken, "refused: code " + d.Code + ", wanted RefuseToken (" + KeelCloseCode.RefuseToken + ")");
                Check(seen.All(p => p.Key != Server), "the server saw events for a refused token: " + Show(seen));
                KeelServerStats st = server.Stats();
                Check(st.TokensRefused == 1, "TokensRefused " + st.TokensRefused + ", wanted 1");
                Check(st.Connections == 2, "the server holds " + st.Connections + " connections, wanted 2");
                Console.WriteLine("client (another key's token): refused, Remote, RefuseToken, \"" + d.Reason
                    + "\"; the server saw no event and counted it (TokensRefused " + st.TokensRefused + ")");

                ExpectError(KeelNative.KEEL_ERR_TOKEN, "token text \"not a token\"",
                    () => KeelClient.ConnectToken(Channels, addr, "not a token").Dispose());
                ExpectError(KeelNative.KEEL_ERR_TOKEN, "20 token bytes",
                    () => KeelClient.ConnectTokenBytes(Channels, addr, raw.Take(20).ToArray()).Dispose());
                Console.WriteLine("bad token text and bytes: KEEL_ERR_TOKEN");
            }
            finally
            {
                foreach (KeelClient c in clients)
                    c.Dispose();
            }
        }
    }

    static int Main(string[] args)
    {
        clock = Stopwatch.StartNew();
        string header = args.Length > 0 ? args[0] : "crates/rudp-ffi/include/keel_rudp.h";
        string mintToken = args.Length > 1 ? args[1] : "target/debug/examples/mint_token";
        try
        {
            BindingMatchesHeader(header);
            BroadcastStopState();
            TokenMode(mintToken);
        }
        catch (Exception e)
        {
            if (e is Failed || e is KeelException || e is IOException || e is DllNotFoundException
                || e is System.ComponentModel.Win32Exception)
            {
                Console.Error.WriteLine("Features.cs: FAILED: " + e.Message);
                return 1;
            }
            throw;
        }
        Console.WriteLine("Features.cs: all passed in " + clock.ElapsedMilliseconds + " ms");
        return 0;
    }
}
