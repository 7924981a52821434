//! The seeded generator: SplitMix64.

/// Multiplier that turns a stream number into a seed offset (an odd
/// 64-bit constant, so distinct streams give distinct starting states).
const STREAM_MIX: u64 = 0xD6E8_FEB8_6659_FD93;

/// SplitMix64 (Steele, Lea and Flood, 2014): small, fast, seeded, and good
/// enough for test decisions; not for keys or anything an attacker may
/// predict.
///
/// The same seed gives the same numbers on every platform and build.
///
/// # Examples
///
/// ```
/// use keel_impair::Rng;
///
/// let (mut a, mut b) = (Rng::new(7), Rng::new(7));
/// assert_eq!(a.next_u64(), b.next_u64());
/// let x = a.f64();
/// assert!((0.0..1.0).contains(&x));
/// assert!(!a.chance(0.0) && a.chance(1.0));
/// ```
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator whose state starts at `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// Stream `stream` of `seed`: an independent sequence, the state
    /// `seed ^ (stream * 0xD6E8_FEB8_6659_FD93)` (wrapping). Stream 0 is
    /// [`Rng::new`]`(seed)`.
    pub fn with_stream(seed: u64, stream: u64) -> Self {
        Rng(seed ^ stream.wrapping_mul(STREAM_MIX))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`: the top 53 bits of one draw.
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `p` (one draw, [`Rng::f64`]` < p`: never for
    /// `p <= 0` or NaN, always for `p >= 1`).
    pub fn chance(&mut self, p: f64) -> bool {
        self.f64() < p
    }
}
