//! The raw GameNetworkingSockets calls that the `game-networking-sockets`
//! wrapper (0.3.0) does not offer safely: a poll group on the client side
//! (the wrapper only gives a server one), receiving on it, and a copying
//! `SendMessageToConnection`. Every `unsafe` block of the GNS peer is here.
#![allow(unsafe_code)]

use gnslib::sys;

/// The flat API's `ISteamNetworkingSockets` interface, valid for the life of
/// the process once `gnslib::GnsGlobal::get()` has returned `Ok`.
fn interface() -> *mut sys::ISteamNetworkingSockets {
    // SAFETY: a plain accessor of GNS's global interface pointer; it has no
    // preconditions. Callers only reach it holding a `&GnsGlobal`, so the
    // library is initialized.
    unsafe { sys::SteamAPI_SteamNetworkingSockets_v009() }
}

/// A poll group of our own: every client connection of one process is put in
/// it, so one `ReceiveMessagesOnPollGroup` call per pump serves them all.
pub struct PollGroup(sys::HSteamNetPollGroup);

impl PollGroup {
    /// Creates a poll group. `_global` proves GNS is initialized.
    pub fn new(_global: &gnslib::GnsGlobal) -> Result<PollGroup, String> {
        // SAFETY: the interface pointer is valid (GNS initialized, see
        // `interface`); CreatePollGroup takes no pointers.
        let handle = unsafe { sys::SteamAPI_ISteamNetworkingSockets_CreatePollGroup(interface()) };
        if handle == sys::k_HSteamNetPollGroup_Invalid {
            return Err("GNS CreatePollGroup returned an invalid handle".into());
        }
        Ok(PollGroup(handle))
    }

    /// Moves `conn` into this poll group (a connection is in at most one).
    pub fn add(&self, conn: gnslib::GnsConnection) -> Result<(), String> {
        let raw = connection_raw(conn);
        // SAFETY: valid interface pointer; both handles are plain integers
        // that GNS validates itself (it returns false for a stale one).
        let ok = unsafe {
            sys::SteamAPI_ISteamNetworkingSockets_SetConnectionPollGroup(interface(), raw, self.0)
        };
        if ok {
            Ok(())
        } else {
            Err(format!(
                "GNS SetConnectionPollGroup failed for connection {raw}"
            ))
        }
    }

    /// Receives up to `max` messages into `out` (appended); returns how many.
    pub fn receive(&self, out: &mut Vec<Message>, max: usize) -> Result<usize, String> {
        let mut slots: Vec<*mut sys::SteamNetworkingMessage_t> = vec![std::ptr::null_mut(); max];
        // SAFETY: valid interface pointer; `slots` has room for `max` message
        // pointers and outlives the call; GNS writes at most `max` of them.
        let n = unsafe {
            sys::SteamAPI_ISteamNetworkingSockets_ReceiveMessagesOnPollGroup(
                interface(),
                self.0,
                slots.as_mut_ptr(),
                max.min(i32::MAX as usize) as i32,
            )
        };
        if n < 0 {
            return Err("GNS ReceiveMessagesOnPollGroup: invalid poll group".into());
        }
        let n = n as usize;
        out.extend(slots[..n].iter().map(|&p| Message(p)));
        Ok(n)
    }
}

impl Drop for PollGroup {
    fn drop(&mut self) {
        // SAFETY: valid interface pointer; the handle is ours and destroyed
        // once (connections in it simply leave the group).
        unsafe {
            sys::SteamAPI_ISteamNetworkingSockets_DestroyPollGroup(interface(), self.0);
        }
    }
}

/// One received message, released back to GNS when dropped.
pub struct Message(*mut sys::SteamNetworkingMessage_t);

impl Message {
    /// The payload bytes.
    pub fn payload(&self) -> &[u8] {
        // SAFETY: GNS handed us this non-null message from a receive call and
        // it stays valid until we release it in `drop`; m_pData/m_cbSize
        // describe its payload buffer (m_cbSize >= 0).
        unsafe {
            let m = &*self.0;
            if m.m_cbSize <= 0 || m.m_pData.is_null() {
                return &[];
            }
            std::slice::from_raw_parts(m.m_pData as *const u8, m.m_cbSize as usize)
        }
    }

    /// The connection it arrived on.
    pub fn connection(&self) -> gnslib::GnsConnection {
        // SAFETY: as in `payload`: a live message from GNS.
        gnslib::GnsConnection::from_raw(unsafe { (*self.0).m_conn })
    }

    /// Whether it was sent reliably (the only flag valid on a received one).
    #[cfg(test)]
    pub fn reliable(&self) -> bool {
        // SAFETY: as in `payload`: a live message from GNS.
        let flags = unsafe { (*self.0).m_nFlags };
        flags & sys::k_nSteamNetworkingSend_Reliable != 0
    }
}

impl Drop for Message {
    fn drop(&mut self) {
        // SAFETY: the message came from a GNS receive call, is non-null and is
        // released exactly once, here.
        unsafe { sys::SteamAPI_SteamNetworkingMessage_t_Release(self.0) }
    }
}

/// Sends `data` on `conn` with GNS send `flags` (GNS copies the bytes).
/// Returns GNS's result code on failure (e.g. `k_EResultLimitExceeded` when the
/// connection's send buffer is full).
pub fn send(conn: gnslib::GnsConnection, data: &[u8], flags: i32) -> Result<(), sys::EResult> {
    // SAFETY: valid interface pointer; `data` is valid for `data.len()` bytes
    // during the call and GNS copies it before returning; the out message
    // number pointer may be null.
    let r = unsafe {
        sys::SteamAPI_ISteamNetworkingSockets_SendMessageToConnection(
            interface(),
            connection_raw(conn),
            data.as_ptr() as *const std::ffi::c_void,
            data.len() as u32,
            flags,
            std::ptr::null_mut(),
        )
    };
    if r == sys::EResult::k_EResultOK {
        Ok(())
    } else {
        Err(r)
    }
}

/// The raw handle inside a wrapper `GnsConnection` (it is `repr(transparent)`
/// over `HSteamNetConnection` but keeps the field private).
fn connection_raw(conn: gnslib::GnsConnection) -> sys::HSteamNetConnection {
    // The wrapper derives Ord/Hash on the handle but offers no getter; its
    // Debug output is `GnsConnection(N)`. Read it through the transparent
    // layout instead of parsing text.
    const _: () = assert!(
        std::mem::size_of::<gnslib::GnsConnection>()
            == std::mem::size_of::<sys::HSteamNetConnection>()
    );
    // SAFETY: `GnsConnection` is `#[repr(transparent)]` over
    // `HSteamNetConnection` (a u32), checked for size above; both are Copy
    // plain integers, so reading one as the other is a valid bit copy.
    unsafe { std::mem::transmute::<gnslib::GnsConnection, sys::HSteamNetConnection>(conn) }
}
