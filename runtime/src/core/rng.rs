//! xorshift64* (Vigna): tiny, seedable and identical on every platform, so a
//! seed reproduces the same model from `ml gen` and the same samples.

#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        // A zero state would stay zero forever; mix the seed so 0 is usable.
        let state = seed ^ 0x9E37_79B9_7F4A_7C15;
        Rng {
            state: if state == 0 { 0x2545_F491_4F6C_DD1D } else { state },
        }
    }

    pub fn next_u32(&mut self) -> u32 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        (self.state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) as u32
    }

    /// Uniform in [0, 1).
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u32() >> 8) as f32 / 16_777_216.0
    }

    /// Uniform in [-a, a).
    pub fn symmetric(&mut self, a: f32) -> f32 {
        (self.next_f32() * 2.0 - 1.0) * a
    }
}
