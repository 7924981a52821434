//! Source ids: what a lane gets back for a registered source, and the mio
//! token it travels as. A leaf, so that the core (which turns tokens into
//! ids) and the lanes (which hand ids to handlers) can share it without
//! depending on each other.

use mio::Token;

use crate::slab::Key;

/// Identifies a source registered into a lane. The id carries a generation:
/// after `deregister`, no event for it reaches the lane, and a source
/// registered later in the same slot gets a different id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SourceId(pub(crate) Key);

impl SourceId {
    /// The slot this source occupies in the reactor's source table. A slot
    /// is reused after `deregister`; the id of the new source still differs
    /// (its generation does), which is what keeps stale events out.
    pub fn slot(&self) -> u32 {
        self.0.index
    }

    /// The token this source is registered with: its slot key, packed.
    #[inline]
    pub(crate) fn token(self) -> Token {
        Token(self.0.to_u64() as usize)
    }

    /// The id a token of a registered source stands for (the inverse of
    /// [`SourceId::token`]); whether it is still live is for the source
    /// table to say.
    #[inline]
    pub(crate) fn from_token(token: Token) -> SourceId {
        SourceId(Key::from_u64(token.0 as u64))
    }
}
