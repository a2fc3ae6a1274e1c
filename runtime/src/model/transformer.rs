//! The forward pass (DESIGN.md §6): one token in, logits out, with an F32 KV
//! cache, grouped-query attention and interleaved RoPE. Every buffer lives in
//! one arena sized at load; a decode step allocates nothing.

use super::format::{Header, TensorEntry};
use super::Model;
use crate::core::arena::{Arena, Carver};
use crate::core::error::{MlError, Result};
use crate::core::quant::{dequantize_row_q4, dequantize_row_q8, QK};
use crate::core::tensor::{row_pieces, scale, QTensor, WType};
use crate::ops::{self, Exec};

struct LayerWeights<'m> {
    attn_norm: &'m [f32],
    wq: QTensor<'m>,
    wk: QTensor<'m>,
    wv: QTensor<'m>,
    wo: QTensor<'m>,
    ffn_norm: &'m [f32],
    w1: QTensor<'m>,
    w2: QTensor<'m>,
    w3: QTensor<'m>,
}

/// Views of every weight, resolved once at load.
struct Weights<'m> {
    tok_emb: QTensor<'m>,
    layers: Vec<LayerWeights<'m>>,
    final_norm: &'m [f32],
    wcls: QTensor<'m>,
}

impl<'m> Weights<'m> {
    fn new(model: &'m Model) -> Result<Weights<'m>> {
        let mut tensors = model.layout().tensors.iter();
        let mut next = || -> Result<&'m TensorEntry> {
            tensors
                .next()
                .ok_or_else(|| MlError::format("tensor table is shorter than the header implies"))
        };
        let tok_emb = model.matrix(next()?)?;
        let mut layers = Vec::new();
        for _ in 0..model.header().n_layers {
            layers.push(LayerWeights {
                attn_norm: model.vector(next()?)?,
                wq: model.matrix(next()?)?,
                wk: model.matrix(next()?)?,
                wv: model.matrix(next()?)?,
                wo: model.matrix(next()?)?,
                ffn_norm: model.vector(next()?)?,
                w1: model.matrix(next()?)?,
                w2: model.matrix(next()?)?,
                w3: model.matrix(next()?)?,
            });
        }
        let final_norm = model.vector(next()?)?;
        let wcls = if model.header().shared_classifier {
            tok_emb
        } else {
            model.matrix(next()?)?
        };
        Ok(Weights {
            tok_emb,
            layers,
            final_norm,
            wcls,
        })
    }
}

/// The arena's regions, in carving order.
#[derive(Clone, Copy)]
enum Region {
    X,
    Xb,
    Xb2,
    Hb,
    Hb2,
    Q,
    Att,
    Logits,
    KeyCache,
    ValueCache,
    ActQuants,
    ActScales,
    RopeCos,
    RopeSin,
}
const REGIONS: usize = Region::RopeSin as usize + 1;

/// Byte size of every region for a header, or NoMem on overflow.
fn region_bytes(h: &Header) -> Result<[usize; REGIONS]> {
    let too_big = || {
        MlError::no_mem(format!(
            "run-time buffers for max_seq {} x n_layers {} x kv_dim {} overflow the address space",
            h.max_seq,
            h.n_layers,
            h.kv_dim()
        ))
    };
    let f32s = |n: u64| -> Result<usize> {
        n.checked_mul(4)
            .and_then(|b| usize::try_from(b).ok())
            .ok_or_else(too_big)
    };
    let (dim, hidden, seq) = (h.dim as u64, h.hidden_dim as u64, h.max_seq as u64);
    let cache = (h.n_layers as u64)
        .checked_mul(seq)
        .and_then(|v| v.checked_mul(h.kv_dim() as u64))
        .ok_or_else(too_big)?;
    let rope = seq.checked_mul(h.head_dim() as u64 / 2).ok_or_else(too_big)?;
    let widest = dim.max(hidden);
    let mut r = [0usize; REGIONS];
    r[Region::X as usize] = f32s(dim)?;
    r[Region::Xb as usize] = f32s(dim)?;
    r[Region::Xb2 as usize] = f32s(dim)?;
    r[Region::Hb as usize] = f32s(hidden)?;
    r[Region::Hb2 as usize] = f32s(hidden)?;
    r[Region::Q as usize] = f32s(dim)?;
    r[Region::Att as usize] = f32s((h.n_heads as u64).checked_mul(seq).ok_or_else(too_big)?)?;
    r[Region::Logits as usize] = f32s(h.vocab as u64)?;
    r[Region::KeyCache as usize] = f32s(cache)?;
    r[Region::ValueCache as usize] = f32s(cache)?;
    r[Region::ActQuants as usize] = usize::try_from(widest).map_err(|_| too_big())?;
    r[Region::ActScales as usize] = f32s(widest / QK as u64)?;
    r[Region::RopeCos as usize] = f32s(rope)?;
    r[Region::RopeSin as usize] = f32s(rope)?;
    Ok(r)
}

/// The chunk arena's regions (`Transformer::set_batch`), in carving order:
/// a prompt chunk's rows, token-major, `batch` of each.
#[derive(Clone, Copy)]
enum ChunkRegion {
    Xs,
    Xbs,
    Xb2s,
    Qs,
    Hbs,
    Hb2s,
    ActQuants,
    ActScales,
    Att,
}
const CHUNK_REGIONS: usize = ChunkRegion::Att as usize + 1;

/// Byte size of every chunk region for `batch` tokens, or NoMem on
/// overflow: `batch` rows of every activation, and per thread one score
/// row of `max_seq` floats for each query of an attention unit
/// (`QUERY_TILE` positions × the query heads of one KV head).
fn chunk_region_bytes(h: &Header, batch: usize, threads: usize) -> Result<[usize; CHUNK_REGIONS]> {
    let too_big = || {
        MlError::no_mem(format!(
            "prompt chunk buffers for a batch of {batch} overflow the address space"
        ))
    };
    let bytes = |n: u64, size: u64| -> Result<usize> {
        n.checked_mul(batch as u64)
            .and_then(|v| v.checked_mul(size))
            .and_then(|b| usize::try_from(b).ok())
            .ok_or_else(too_big)
    };
    let (dim, hidden) = (h.dim as u64, h.hidden_dim as u64);
    let widest = dim.max(hidden);
    let mut r = [0usize; CHUNK_REGIONS];
    r[ChunkRegion::Xs as usize] = bytes(dim, 4)?;
    r[ChunkRegion::Xbs as usize] = bytes(dim, 4)?;
    r[ChunkRegion::Xb2s as usize] = bytes(dim, 4)?;
    r[ChunkRegion::Qs as usize] = bytes(dim, 4)?;
    r[ChunkRegion::Hbs as usize] = bytes(hidden, 4)?;
    r[ChunkRegion::Hb2s as usize] = bytes(hidden, 4)?;
    r[ChunkRegion::ActQuants as usize] = bytes(widest, 1)?;
    r[ChunkRegion::ActScales as usize] = bytes(widest / QK as u64, 4)?;
    let group = (h.n_heads / h.n_kv_heads.max(1)) as u64;
    r[ChunkRegion::Att as usize] = (QUERY_TILE as u64 * group)
        .checked_mul(h.max_seq as u64)
        .and_then(|v| v.checked_mul(threads as u64 * 4))
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(too_big)?;
    Ok(r)
}

/// The chunk arena carved into a prompt chunk's buffers.
struct ChunkBuffers<'a> {
    xs: &'a mut [f32],
    xbs: &'a mut [f32],
    xb2s: &'a mut [f32],
    qs: &'a mut [f32],
    hbs: &'a mut [f32],
    hb2s: &'a mut [f32],
    act_q: &'a mut [i8],
    act_d: &'a mut [f32],
    att: &'a mut [f32],
}

impl<'a> ChunkBuffers<'a> {
    fn carve(mut c: Carver<'a>, r: &[usize; CHUNK_REGIONS]) -> ChunkBuffers<'a> {
        use ChunkRegion::*;
        ChunkBuffers {
            xs: c.f32s(r[Xs as usize]),
            xbs: c.f32s(r[Xbs as usize]),
            xb2s: c.f32s(r[Xb2s as usize]),
            qs: c.f32s(r[Qs as usize]),
            hbs: c.f32s(r[Hbs as usize]),
            hb2s: c.f32s(r[Hb2s as usize]),
            act_q: c.i8s(r[ActQuants as usize]),
            act_d: c.f32s(r[ActScales as usize]),
            att: c.f32s(r[Att as usize]),
        }
    }
}

/// The arena carved into named buffers for one step.
struct Buffers<'a> {
    x: &'a mut [f32],
    xb: &'a mut [f32],
    xb2: &'a mut [f32],
    hb: &'a mut [f32],
    hb2: &'a mut [f32],
    q: &'a mut [f32],
    att: &'a mut [f32],
    logits: &'a mut [f32],
    key_cache: &'a mut [f32],
    value_cache: &'a mut [f32],
    act_q: &'a mut [i8],
    act_d: &'a mut [f32],
    rope_cos: &'a mut [f32],
    rope_sin: &'a mut [f32],
}

impl<'a> Buffers<'a> {
    fn carve(mut c: Carver<'a>, r: &[usize; REGIONS]) -> Buffers<'a> {
        use Region::*;
        Buffers {
            x: c.f32s(r[X as usize]),
            xb: c.f32s(r[Xb as usize]),
            xb2: c.f32s(r[Xb2 as usize]),
            hb: c.f32s(r[Hb as usize]),
            hb2: c.f32s(r[Hb2 as usize]),
            q: c.f32s(r[Q as usize]),
            att: c.f32s(r[Att as usize]),
            logits: c.f32s(r[Logits as usize]),
            key_cache: c.f32s(r[KeyCache as usize]),
            value_cache: c.f32s(r[ValueCache as usize]),
            act_q: c.i8s(r[ActQuants as usize]),
            act_d: c.f32s(r[ActScales as usize]),
            rope_cos: c.f32s(r[RopeCos as usize]),
            rope_sin: c.f32s(r[RopeSin as usize]),
        }
    }
}

/// A model ready to decode: its weights and its run-time state.
pub struct Transformer<'m> {
    /// The model's header, with max_seq the context this transformer runs
    /// with (at most the model's).
    header: Header,
    /// The model's own max_seq.
    model_max_seq: u32,
    weights: Weights<'m>,
    regions: [usize; REGIONS],
    arena: Arena,
    /// Prompt tokens run together (`set_batch`); 1 runs them one by one
    /// through `forward`.
    batch: usize,
    /// The buffers of a prompt chunk of `batch` tokens, apart from the
    /// decode step's (`arena`), which stay as they are whatever the batch.
    chunk_regions: [usize; CHUNK_REGIONS],
    chunk_arena: Arena,
    /// Every row's logits of a chunk (`feed_logits`), `batch` rows of
    /// vocab floats: allocated on the first call after `set_batch`, since
    /// run and chat never need them and they can outweigh the rest of the
    /// chunk's buffers. Empty until then.
    chunk_logits: Arena,
    exec: Exec,
}

impl<'m> Transformer<'m> {
    /// A transformer on the default number of threads (one without the
    /// `threads` feature; see `core::threads::default_threads` with it).
    pub fn new(model: &'m Model) -> Result<Transformer<'m>> {
        #[cfg(feature = "threads")]
        let threads = crate::core::threads::default_threads();
        #[cfg(not(feature = "threads"))]
        let threads = 1;
        Transformer::with_threads(model, threads)
    }

    /// A transformer on `threads` threads (ignored without the `threads`
    /// feature). Logits are bit-identical for any thread count.
    pub fn with_threads(model: &'m Model, threads: usize) -> Result<Transformer<'m>> {
        Transformer::with_context(model, threads, model.header().max_seq as usize)
    }

    /// A transformer that runs positions `0..ctx` only (at most the model's
    /// max_seq): the RoPE tables and the KV cache are sized by `ctx`, so a
    /// header's max_seq costs nothing up front. Logits are those of the
    /// full context at every position it holds. `header().max_seq` is `ctx`.
    pub fn with_context(model: &'m Model, threads: usize, ctx: usize) -> Result<Transformer<'m>> {
        let mut header = *model.header();
        let model_max_seq = header.max_seq;
        if ctx == 0 {
            return Err(MlError::shape("a context of 0 positions holds no token"));
        }
        header.max_seq = u32::try_from(ctx).unwrap_or(u32::MAX).min(model_max_seq);
        let regions = region_bytes(&header)?;
        let arena = Arena::new(&regions, "run-time buffers")?;
        let mut t = Transformer {
            header,
            model_max_seq,
            weights: Weights::new(model)?,
            regions,
            arena,
            batch: 1,
            chunk_regions: [0; CHUNK_REGIONS],
            chunk_arena: Arena::new(&[0; CHUNK_REGIONS], "prompt chunk buffers")?,
            chunk_logits: Arena::new(&[0], "per-position logits")?,
            exec: Exec::new(threads)?,
        };
        t.fill_rope_tables();
        Ok(t)
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    /// "the model's context (max_seq) is N", or, when `with_context` made it
    /// smaller, "the context (--ctx) is N (the model's max_seq is M)".
    pub fn context_description(&self) -> String {
        if self.header.max_seq == self.model_max_seq {
            format!("the model's context (max_seq) is {}", self.model_max_seq)
        } else {
            format!(
                "the context (--ctx) is {} (the model's max_seq is {})",
                self.header.max_seq, self.model_max_seq
            )
        }
    }

    /// Threads the forward pass runs on.
    pub fn threads(&self) -> usize {
        self.exec.threads()
    }

    /// Bytes of the run-time arena (the prompt chunk's buffers, and its
    /// per-position logits once `feed_logits` has run, included).
    pub fn arena_bytes(&self) -> usize {
        self.arena.len() + self.chunk_arena.len() + self.chunk_logits.len()
    }

    /// Prompt tokens `prefill` and `feed` run together.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Runs prompts in chunks of up to `batch` tokens (1..=`ops::MAX_BATCH`):
    /// each weight matrix once per chunk instead of once per token. 1 feeds
    /// them one at a time through `forward`. The logits are bit-identical
    /// for every batch (and thread count). Allocates the chunk's buffers
    /// here, once; the KV cache and everything run so far are kept.
    pub fn set_batch(&mut self, batch: usize) -> Result<()> {
        if batch == 0 || batch > ops::MAX_BATCH {
            return Err(MlError::shape(format!(
                "a batch of {batch} tokens: it must be 1 to {}",
                ops::MAX_BATCH
            )));
        }
        let regions = if batch == 1 {
            [0; CHUNK_REGIONS]
        } else {
            chunk_region_bytes(&self.header, batch, self.exec.threads())?
        };
        // The old chunk buffers go first, so the two are never held at once;
        // if the new ones cannot be had, the transformer is left at batch 1.
        self.chunk_arena = Arena::new(&[0; CHUNK_REGIONS], "prompt chunk buffers")?;
        self.chunk_logits = Arena::new(&[0], "per-position logits")?;
        (self.batch, self.chunk_regions) = (1, [0; CHUNK_REGIONS]);
        self.chunk_arena = Arena::new(&regions, "prompt chunk buffers")?;
        (self.batch, self.chunk_regions) = (batch, regions);
        Ok(())
    }

    fn buffers(&mut self) -> Buffers<'_> {
        Buffers::carve(self.arena.carver(), &self.regions)
    }

    /// cos/sin of pos · θ^(−2i/head_dim) for every position and pair,
    /// computed in f64 so every platform's libm rounds to the same f32.
    fn fill_rope_tables(&mut self) {
        let half = self.header.head_dim() as usize / 2;
        let (theta, head_dim) = (self.header.rope_theta as f64, self.header.head_dim() as f64);
        let b = self.buffers();
        for (p, (cos_row, sin_row)) in b
            .rope_cos
            .chunks_exact_mut(half)
            .zip(b.rope_sin.chunks_exact_mut(half))
            .enumerate()
        {
            for i in 0..half {
                let angle = p as f64 * theta.powf(-2.0 * i as f64 / head_dim);
                cos_row[i] = angle.cos() as f32;
                sin_row[i] = angle.sin() as f32;
            }
        }
    }

    /// Runs one token at position `pos` and returns the logits.
    pub fn forward(&mut self, token: u32, pos: usize) -> Result<&mut [f32]> {
        let h = self.header;
        if token >= h.vocab {
            return Err(MlError::shape(format!(
                "token id {token} is outside the vocabulary of {}",
                h.vocab
            )));
        }
        if pos >= h.max_seq as usize {
            return Err(MlError::shape(format!(
                "position {pos} is past the end: {}",
                self.context_description()
            )));
        }
        let (kv_dim, head_dim) = (h.kv_dim() as usize, h.head_dim() as usize);
        let (n_heads, n_kv_heads, seq) = (h.n_heads as usize, h.n_kv_heads as usize, h.max_seq as usize);
        let group = n_heads / n_kv_heads;
        let half = head_dim / 2;
        let inv_sqrt_hd = 1.0 / (head_dim as f32).sqrt();
        let (weights, exec) = (&self.weights, &self.exec);
        let b = Buffers::carve(self.arena.carver(), &self.regions);

        embed(b.x, &weights.tok_emb, token as usize);
        let cos = &b.rope_cos[pos * half..(pos + 1) * half];
        let sin = &b.rope_sin[pos * half..(pos + 1) * half];

        let warm_q8 = crate::model::streaming::streaming().warm_q8_matrices
            && exec.threads() == 1
            && h.wtype == WType::Q8_0
            && !weights.wcls.packed;
        let warm = |w: &QTensor| {
            if warm_q8 {
                prefetch_matrix(w);
            }
        };
        warm(&weights.layers[0].wq);
        for (l, lw) in weights.layers.iter().enumerate() {
            // Attention.
            warm(&lw.wk);
            warm(&lw.wv);
            ops::rmsnorm(b.xb, b.x, lw.attn_norm, h.norm_eps);
            let qa = ops::quantize(b.act_q, b.act_d, b.xb);
            let row = (l * seq + pos) * kv_dim;
            let k = &mut b.key_cache[row..row + kv_dim];
            let v = &mut b.value_cache[row..row + kv_dim];
            exec.matvecs([&mut *b.q, &mut *k, &mut *v], [&lw.wq, &lw.wk, &lw.wv], &qa);
            ops::rope(b.q, k, cos, sin, head_dim, n_heads, n_kv_heads);

            // Heads are independent: split them between threads.
            let layer_keys = &b.key_cache[l * seq * kv_dim..(l * seq + pos + 1) * kv_dim];
            let layer_values = &b.value_cache[l * seq * kv_dim..(l * seq + pos + 1) * kv_dim];
            let q = &*b.q;
            warm(&lw.wo);
            let per = exec.units_per_thread(n_heads, 1);
            let parts = b.att[..n_heads * seq]
                .chunks_mut(per * seq)
                .zip(b.xb[..n_heads * head_dim].chunks_mut(per * head_dim))
                .enumerate()
                .map(|(i, (att, out))| (i * per, att, out));
            exec.for_parts(parts, &|(first, att, out): (usize, &mut [f32], &mut [f32])| {
                attend_heads(
                    q,
                    first,
                    group,
                    head_dim,
                    layer_keys,
                    layer_values,
                    kv_dim,
                    inv_sqrt_hd,
                    pos + 1,
                    att,
                    seq,
                    out,
                    true,
                );
            });

            let qa = ops::quantize(b.act_q, b.act_d, b.xb);
            exec.matvec(b.xb2, &lw.wo, &qa);
            ops::add(b.x, b.xb2);

            // Feed-forward: w2 · (silu(w1 · h) ⊙ (w3 · h)).
            warm(&lw.w1);
            warm(&lw.w3);
            ops::rmsnorm(b.xb, b.x, lw.ffn_norm, h.norm_eps);
            let qa = ops::quantize(b.act_q, b.act_d, b.xb);
            exec.matvecs([&mut *b.hb, &mut *b.hb2], [&lw.w1, &lw.w3], &qa);
            warm(&lw.w2);
            ops::silu_mul(b.hb, b.hb2);
            let qa = ops::quantize(b.act_q, b.act_d, b.hb);
            exec.matvec(b.xb2, &lw.w2, &qa);
            match weights.layers.get(l + 1) {
                Some(next) => warm(&next.wq),
                None => warm(&weights.wcls),
            }
            ops::add(b.x, b.xb2);
        }
        ops::rmsnorm(b.xb, b.x, weights.final_norm, h.norm_eps);
        let qa = ops::quantize(b.act_q, b.act_d, b.xb);
        exec.matvec(b.logits, &weights.wcls, &qa);
        check_logits(b.logits, pos)?;
        Ok(b.logits)
    }
}

impl Transformer<'_> {
    /// Runs every prompt token from position 0 and returns the logits after
    /// the last one. A prompt longer than the context is refused up front.
    pub fn prefill(&mut self, prompt: &[u32]) -> Result<&mut [f32]> {
        if prompt.is_empty() {
            return Err(MlError::shape("the prompt is empty; give at least one token"));
        }
        if prompt.len() > self.header.max_seq as usize {
            return Err(MlError::shape(format!(
                "the prompt has {} tokens but {}",
                prompt.len(),
                self.context_description()
            )));
        }
        self.feed(prompt, 0)
    }

    /// Runs `tokens` at positions `start..` (a chat's next turn, after the
    /// `start` positions already in the cache) and returns the logits after
    /// the last one: in chunks of `batch()` tokens, or with a batch of 1
    /// one `forward` per token. The logits are the same bits either way.
    pub fn feed(&mut self, tokens: &[u32], start: usize) -> Result<&mut [f32]> {
        let end = self.check_feed(tokens, start)?;
        let (last, rest) = tokens.split_last().ok_or_else(|| MlError::shape("no tokens to feed"))?;
        if self.batch == 1 {
            for (i, &token) in rest.iter().enumerate() {
                self.forward(token, start + i)?;
            }
            return self.forward(*last, end - 1);
        }
        // The last token is a chunk's last too (the classifier runs after
        // it): the chunks run front to back, the last one up to `end`.
        let mut pos = start;
        for chunk in tokens.chunks(self.batch) {
            self.forward_chunk(chunk, pos);
            pos += chunk.len();
        }
        let in_last = (tokens.len() - 1) % self.batch;
        self.logits_after(in_last, end - 1)
    }

    /// Runs `tokens` at positions `start..` as `feed` does and calls
    /// `each(pos, logits)` for every one of them, in order, with the logits
    /// `forward` returns there (the same bits). With a batch above 1 the
    /// classifier runs as one matmul over each chunk's rows, so its matrix
    /// is read once per chunk rather than once per token; its output rows
    /// are allocated on the first call after `set_batch`, and later calls
    /// allocate nothing. With a batch of 1 it is one `forward` per token.
    pub fn feed_logits(&mut self, tokens: &[u32], start: usize, each: &mut dyn FnMut(usize, &[f32])) -> Result<()> {
        self.check_feed(tokens, start)?;
        if self.batch == 1 {
            for (i, &token) in tokens.iter().enumerate() {
                each(start + i, self.forward(token, start + i)?);
            }
            return Ok(());
        }
        let vocab = self.header.vocab as usize;
        if self.chunk_logits.is_empty() {
            let bytes = (vocab as u64)
                .checked_mul(self.batch as u64 * 4)
                .and_then(|b| usize::try_from(b).ok())
                .ok_or_else(|| {
                    MlError::no_mem(format!(
                        "the logits of a batch of {} over a vocabulary of {vocab} overflow the address space",
                        self.batch
                    ))
                })?;
            self.chunk_logits = Arena::new(&[bytes], "per-position logits")?;
        }
        let mut pos = start;
        for chunk in tokens.chunks(self.batch) {
            self.forward_chunk(chunk, pos);
            let n = chunk.len();
            let h = self.header;
            let dim = h.dim as usize;
            let (weights, exec) = (&self.weights, &self.exec);
            let c = ChunkBuffers::carve(self.chunk_arena.carver(), &self.chunk_regions);
            let bytes = self.chunk_logits.len();
            let logits = &mut self.chunk_logits.carver().f32s(bytes)[..n * vocab];
            // Row by row the final norm and quantization `forward` does,
            // then the classifier over all rows at once.
            for (xb, x) in c.xbs.chunks_exact_mut(dim).zip(c.xs.chunks_exact(dim)).take(n) {
                ops::rmsnorm(xb, x, weights.final_norm, h.norm_eps);
            }
            let qa = ops::quantize_rows(c.act_q, c.act_d, c.xbs, dim, n);
            exec.matmul(logits.chunks_exact_mut(vocab), &weights.wcls, &qa);
            for (t, row) in logits.chunks_exact(vocab).enumerate() {
                check_logits(row, pos + t)?;
                each(pos + t, row);
            }
            pos += n;
        }
        Ok(())
    }

    /// Checks that `tokens` can run at positions `start..` and returns
    /// where they end.
    fn check_feed(&self, tokens: &[u32], start: usize) -> Result<usize> {
        let h = self.header;
        let Some(end) = start.checked_add(tokens.len()).filter(|_| !tokens.is_empty()) else {
            return Err(MlError::shape("no tokens to feed; give at least one"));
        };
        if end > h.max_seq as usize {
            return Err(MlError::shape(format!(
                "{} tokens from position {start} run past the end: {}",
                tokens.len(),
                self.context_description()
            )));
        }
        if let Some(&t) = tokens.iter().find(|&&t| t >= h.vocab) {
            return Err(MlError::shape(format!(
                "token id {t} is outside the vocabulary of {}",
                h.vocab
            )));
        }
        Ok(end)
    }

    /// Runs a chunk of tokens (at most `batch`, all checked) at positions
    /// `pos0..`, leaving their K/V rows in the cache and their last hidden
    /// states in the chunk's `xs` rows. Every step is `forward`'s, done for
    /// all rows of the chunk: row by row for the norms, quantization, RoPE,
    /// residual adds and attention (the same kernels on the same rows), and
    /// one matmul per weight matrix, whose outputs are the matvec's bits.
    fn forward_chunk(&mut self, tokens: &[u32], pos0: usize) {
        let h = self.header;
        let n = tokens.len();
        let (dim, hidden) = (h.dim as usize, h.hidden_dim as usize);
        let (kv_dim, head_dim) = (h.kv_dim() as usize, h.head_dim() as usize);
        let (n_heads, n_kv_heads, seq) = (h.n_heads as usize, h.n_kv_heads as usize, h.max_seq as usize);
        let group = n_heads / n_kv_heads;
        let half = head_dim / 2;
        let inv_sqrt_hd = 1.0 / (head_dim as f32).sqrt();
        let (weights, exec) = (&self.weights, &self.exec);
        let b = Buffers::carve(self.arena.carver(), &self.regions);
        let c = ChunkBuffers::carve(self.chunk_arena.carver(), &self.chunk_regions);

        for (x, &token) in c.xs.chunks_exact_mut(dim).zip(tokens) {
            embed(x, &weights.tok_emb, token as usize);
        }
        for (l, lw) in weights.layers.iter().enumerate() {
            // Attention.
            for (xb, x) in c.xbs.chunks_exact_mut(dim).zip(c.xs.chunks_exact(dim)).take(n) {
                ops::rmsnorm(xb, x, lw.attn_norm, h.norm_eps);
            }
            let qa = ops::quantize_rows(c.act_q, c.act_d, c.xbs, dim, n);
            let first = (l * seq + pos0) * kv_dim;
            let keys = &mut b.key_cache[first..first + n * kv_dim];
            let values = &mut b.value_cache[first..first + n * kv_dim];
            exec.matmuls(
                [
                    c.qs[..n * dim].chunks_exact_mut(dim),
                    keys.chunks_exact_mut(kv_dim),
                    values.chunks_exact_mut(kv_dim),
                ],
                [&lw.wq, &lw.wk, &lw.wv],
                &qa,
            );
            for (t, (q, k)) in
                c.qs.chunks_exact_mut(dim)
                    .zip(keys.chunks_exact_mut(kv_dim))
                    .enumerate()
            {
                let pos = pos0 + t;
                let cos = &b.rope_cos[pos * half..(pos + 1) * half];
                let sin = &b.rope_sin[pos * half..(pos + 1) * half];
                ops::rope(q, k, cos, sin, head_dim, n_heads, n_kv_heads);
            }

            // Each position attends over the cache up to itself, the
            // chunk's earlier rows included, with `forward`'s operations in
            // `forward`'s order. The units of work are (query tile, KV
            // head): a tile of `QUERY_TILE` positions and the `group` query
            // heads of one KV head, which read each key and value tile from
            // L1 for all of them (`attend_queries`). Units write unit-major
            // into `xb2s` (free until `wo`), split into contiguous shares
            // for the threads, and are scattered to `xbs` after.
            let layer_keys = &b.key_cache[l * seq * kv_dim..(l * seq + pos0 + n) * kv_dim];
            let layer_values = &b.value_cache[l * seq * kv_dim..(l * seq + pos0 + n) * kv_dim];
            let threads = exec.threads();
            let units = n.div_ceil(QUERY_TILE) * n_kv_heads;
            let unit_positions = |u: usize| {
                let t0 = (u / n_kv_heads) * QUERY_TILE;
                t0..(t0 + QUERY_TILE).min(n)
            };
            // A position's query heads of one KV head, side by side.
            let span = group * head_dim;
            let unit_floats = |u: usize| unit_positions(u).len() * span;
            let cost = |u: usize| unit_positions(u).map(|t| pos0 + t + 1 + ATTN_FIXED_COST).sum::<usize>();
            let mut outs = &mut c.xb2s[..n * dim];
            let parts = c
                .att
                .chunks_mut(QUERY_TILE * group * seq)
                .take(threads)
                .enumerate()
                .map(|(i, att)| {
                    let (u0, u1) = (cost_cut(i, threads, units, cost), cost_cut(i + 1, threads, units, cost));
                    let floats = (u0..u1).map(unit_floats).sum();
                    let (mine, rest) = std::mem::take(&mut outs).split_at_mut(floats);
                    outs = rest;
                    (u0..u1, mine, att)
                });
            let qs = &*c.qs;
            let layer = AttnLayer {
                keys: layer_keys,
                values: layer_values,
                kv_dim,
                head_dim,
                scale: inv_sqrt_hd,
            };
            exec.for_parts(parts, &|(units, mut out, att): (
                std::ops::Range<usize>,
                &mut [f32],
                &mut [f32],
            )| {
                for u in units {
                    let (positions, kv_head) = (unit_positions(u), u % n_kv_heads);
                    let (mine, rest) = std::mem::take(&mut out).split_at_mut(unit_floats(u));
                    out = rest;
                    let queries = positions.clone().flat_map(|t| {
                        let heads = &qs[t * dim + kv_head * span..][..span];
                        heads.chunks_exact(head_dim).map(move |q| (q, pos0 + t + 1))
                    });
                    layer.attend_queries(kv_head, queries, att, seq, mine);
                }
            });
            // Unit-major [tile][kv head][position][head] to position-major.
            let mut from = 0;
            for u in 0..units {
                let kv_head = u % n_kv_heads;
                for t in unit_positions(u) {
                    c.xbs[t * dim + kv_head * span..][..span].copy_from_slice(&c.xb2s[from..from + span]);
                    from += span;
                }
            }

            let qa = ops::quantize_rows(c.act_q, c.act_d, c.xbs, dim, n);
            exec.matmul(c.xb2s[..n * dim].chunks_exact_mut(dim), &lw.wo, &qa);
            for (x, xb2) in c.xs.chunks_exact_mut(dim).zip(c.xb2s.chunks_exact(dim)).take(n) {
                ops::add(x, xb2);
            }

            // Feed-forward: w2 · (silu(w1 · h) ⊙ (w3 · h)).
            for (xb, x) in c.xbs.chunks_exact_mut(dim).zip(c.xs.chunks_exact(dim)).take(n) {
                ops::rmsnorm(xb, x, lw.ffn_norm, h.norm_eps);
            }
            let qa = ops::quantize_rows(c.act_q, c.act_d, c.xbs, dim, n);
            exec.matmuls(
                [
                    c.hbs[..n * hidden].chunks_exact_mut(hidden),
                    c.hb2s[..n * hidden].chunks_exact_mut(hidden),
                ],
                [&lw.w1, &lw.w3],
                &qa,
            );
            for (hb, hb2) in c.hbs.chunks_exact_mut(hidden).zip(c.hb2s.chunks_exact(hidden)).take(n) {
                ops::silu_mul(hb, hb2);
            }
            let qa = ops::quantize_rows(c.act_q, c.act_d, c.hbs, hidden, n);
            exec.matmul(c.xb2s[..n * dim].chunks_exact_mut(dim), &lw.w2, &qa);
            for (x, xb2) in c.xs.chunks_exact_mut(dim).zip(c.xb2s.chunks_exact(dim)).take(n) {
                ops::add(x, xb2);
            }
        }
    }

    /// The classifier over row `t` of the last chunk's hidden states: the
    /// logits `forward` would return after that token.
    fn logits_after(&mut self, t: usize, pos: usize) -> Result<&mut [f32]> {
        let h = self.header;
        let dim = h.dim as usize;
        let (weights, exec) = (&self.weights, &self.exec);
        let b = Buffers::carve(self.arena.carver(), &self.regions);
        let c = ChunkBuffers::carve(self.chunk_arena.carver(), &self.chunk_regions);
        ops::rmsnorm(b.xb, &c.xs[t * dim..(t + 1) * dim], weights.final_norm, h.norm_eps);
        let qa = ops::quantize(b.act_q, b.act_d, b.xb);
        exec.matvec(b.logits, &weights.wcls, &qa);
        check_logits(b.logits, pos)?;
        Ok(b.logits)
    }
}

/// Finite scales and norm weights (checked at load) can still overflow f32
/// on the way (a scale of 1e38, say): such a model's logits are not a
/// distribution, and callers are told so.
fn check_logits(logits: &[f32], pos: usize) -> Result<()> {
    match logits.iter().position(|v| !v.is_finite()) {
        Some(i) => Err(MlError::format(format!(
            "logit {i} is {} at position {pos}: the model's weights overflow f32 (corrupt or badly scaled \
             tensor values)",
            logits[i]
        ))),
        None => Ok(()),
    }
}

/// Where thread `i`'s share of `units` work units starts (for i =
/// threads, where the last one ends), the units cut into contiguous
/// shares of about equal `cost` rather than equal counts: a prompt
/// chunk's attention units cost more the later their positions.
fn cost_cut(i: usize, threads: usize, units: usize, cost: impl Fn(usize) -> usize) -> usize {
    let total: usize = (0..units).map(&cost).sum();
    let goal = total * i / threads;
    let (mut done, mut u) = (0, 0);
    while u < units && done < goal {
        done += cost(u);
        u += 1;
    }
    u
}

/// A query's attention cost in keys, beyond the keys themselves: its
/// softmax and set-up.
const ATTN_FIXED_COST: usize = 16;

/// Positions per query tile of a prompt chunk's attention: with SmolLM2's
/// three query heads per KV head, 24 queries read each key and value tile
/// while it is in L1.
const QUERY_TILE: usize = 8;

/// Keys per tile in a prompt chunk's attention: a tile of one KV head's
/// rows (SmolLM2: 64 × 256 bytes) stays in L1 while every query of the
/// unit reads it. SmolLM2-135M Q8_0 pp2000, avx2, 1 thread, 3 interleaved
/// rounds: 242–244 tok/s with 16, 246–249 with 32, 249–251 with 64.
const KEY_TILE: usize = 64;

/// One layer's KV cache, as a prompt chunk's attention reads it.
struct AttnLayer<'a> {
    keys: &'a [f32],
    values: &'a [f32],
    kv_dim: usize,
    head_dim: usize,
    scale: f32,
}

impl AttnLayer<'_> {
    /// Attention of `queries` (each a query head's vector, all of KV head
    /// `kv_head`, and how many positions it attends over), query r with
    /// row r of `att` (`seq` floats) and `head_dim` slice r of `out`.
    ///
    /// The keys run in tiles, every query over one tile before the next,
    /// so a tile's rows come from memory once for all of them. Each
    /// query's scores, softmax and sums are the kernels' operations in the
    /// order `attend_heads` (decode) runs them: a score depends on its own
    /// row alone, and `attn_mix` adds row after row into `out`, so neither
    /// the tiling nor the query order changes a bit.
    fn attend_queries<'q>(
        &self,
        kv_head: usize,
        queries: impl Iterator<Item = (&'q [f32], usize)> + Clone,
        att: &mut [f32],
        seq: usize,
        out: &mut [f32],
    ) {
        let (kv_dim, head_dim) = (self.kv_dim, self.head_dim);
        let offset = kv_head * head_dim;
        let longest = queries.clone().map(|(_, len)| len).max().unwrap_or(0);
        let tiles = || {
            (0..longest)
                .step_by(KEY_TILE)
                .map(|k0| k0..(k0 + KEY_TILE).min(longest))
        };
        for tile in tiles() {
            let rows = &self.keys[tile.start * kv_dim + offset..];
            for ((q, len), att) in queries.clone().zip(att.chunks_mut(seq)) {
                if len > tile.start {
                    ops::attn_scores(&mut att[tile.start..tile.end.min(len)], q, rows, kv_dim, self.scale);
                }
            }
        }
        for ((_, len), (att, out)) in queries.clone().zip(att.chunks_mut(seq).zip(out.chunks_mut(head_dim))) {
            ops::softmax(&mut att[..len]);
            out.fill(0.0);
        }
        for tile in tiles() {
            let rows = &self.values[tile.start * kv_dim + offset..];
            for ((_, len), (att, out)) in queries.clone().zip(att.chunks(seq).zip(out.chunks_mut(head_dim))) {
                if len > tile.start {
                    ops::attn_mix(out, &att[tile.start..tile.end.min(len)], rows, kv_dim);
                }
            }
        }
    }
}

/// Positions per attention tile: 16 rows of a GQA cache (SmolLM2: 16 ×
/// 768 bytes of keys) stay in L1 while every head reads them. SmolLM2-135M
/// Q4_0, 512 decoded tokens on one thread (`ml bench`, 5 interleaved runs
/// each): 199.2 tok/s untiled, 204.5 with 8, 209.6 with 16; 32 and 64 gained
/// less.
const ATTN_TILE: usize = 16;

/// How many tiles ahead `attend_heads` asks for its key and value rows, in
/// a decoded token's attention: every row comes from memory there (the
/// layer's weights streamed through the caches since its last visit), and
/// the kernels' own prefetch, a tile ahead into L1 for the head at hand,
/// has too few lines in flight. SmolLM2-135M Q4_0, 1 thread, 1024 decoded
/// tokens, three interleaved rounds (`ml bench … -p 1 -n 1024`): 181–206
/// tok/s without, 231–250 with 1, 199–247 with 4, 204–238 with 8. A prompt
/// chunk re-reads rows its earlier positions brought in, and lost 1.5% of
/// pp512 to it, so it goes without.
const TILES_AHEAD: usize = 1;

/// Attention of the heads `first..` (one `seq`-long row of `att` and one
/// `head_dim` slice of `out` each) over positions 0..len: scores against
/// every cached key, softmax, then the probability-weighted sum of the
/// cached values. `keys`/`values` hold one `kv_dim` row per position; head
/// h reads KV head h / group, at offset (h / group)·head_dim in each row.
///
/// The positions run in tiles, every head over one tile before the next:
/// a tile's rows come from memory once and the other heads read them from
/// L1, instead of each head streaming the whole history on its own. Each
/// head's scores and sums are the same operations in the same order as
/// one call over all positions (a score depends on its row alone, and
/// `attn_mix` adds row after row into `out`), so the tiling changes no bit.
#[allow(clippy::too_many_arguments)]
fn attend_heads(
    q: &[f32],
    first: usize,
    group: usize,
    head_dim: usize,
    keys: &[f32],
    values: &[f32],
    kv_dim: usize,
    scale: f32,
    len: usize,
    att: &mut [f32],
    seq: usize,
    out: &mut [f32],
    prefetch_ahead: bool,
) {
    let heads = out.len() / head_dim;
    let kv_off = |j: usize| ((first + j) / group) * head_dim;
    let tiles = || (0..len).step_by(ATTN_TILE).map(|t0| t0..(t0 + ATTN_TILE).min(len));
    // With `prefetch_ahead`, the rows `TILES_AHEAD` tiles on, into L2.
    let ahead = |cache: &[f32], tile: &std::ops::Range<usize>| {
        if !prefetch_ahead {
            return;
        }
        let start = (tile.start + TILES_AHEAD * ATTN_TILE).min(len);
        let end = (start + ATTN_TILE).min(len);
        ops::prefetch_l2(&cache[start * kv_dim..end * kv_dim]);
    };
    for tile in tiles() {
        ahead(keys, &tile);
        for (j, att) in att.chunks_mut(seq).take(heads).enumerate() {
            let q_h = &q[(first + j) * head_dim..(first + j + 1) * head_dim];
            let rows = &keys[tile.start * kv_dim + kv_off(j)..];
            ops::attn_scores(&mut att[tile.clone()], q_h, rows, kv_dim, scale);
        }
    }
    for (att, out) in att.chunks_mut(seq).zip(out.chunks_mut(head_dim)) {
        ops::softmax(&mut att[..len]);
        out.fill(0.0);
    }
    for tile in tiles() {
        ahead(values, &tile);
        for (j, (att, out)) in att.chunks(seq).zip(out.chunks_mut(head_dim)).enumerate() {
            ops::attn_mix(
                out,
                &att[tile.clone()],
                &values[tile.start * kv_dim + kv_off(j)..],
                kv_dim,
            );
        }
    }
}

/// Requests a matrix (its first `WARM_LIMIT` bytes, i.e. all but the
/// classifier, and their scales) into the caches in one sequential pass.
/// `forward` does it for each Q8_0 matrix one phase before its matvec.
/// Measured on SmolLM2-135M Q8_0 at 1 thread (`ml bench`, 8 interleaved
/// runs each): 63.8% of the roofline without, 70.2% with; 512 KiB gave
/// less, and Q4_0 gained nothing (68.0% vs 66.5%), so its matvecs stream on
/// their own prefetch alone.
///
/// Not for packed matrices (`core::tensor::pack_row_groups`): they stream
/// in one ascending run the hardware prefetchers follow, and the pass only
/// delayed them (SmolLM2-135M Q8_0, 1 thread, 6 interleaved runs: 64.3% of
/// the roofline with it, 76.0% without; 70.8% row-major with it).
///
/// Only on a single thread: with more, the matvec's cores stream in
/// parallel, and the caller's prefetch pass only delays them (2 threads,
/// 6 interleaved runs: 73.2% of the roofline without, 69.0% with).
fn prefetch_matrix(w: &QTensor) {
    const WARM_LIMIT: usize = 2 << 20;
    let bytes = WARM_LIMIT.min(w.q.len());
    let rows = bytes / w.row_bytes().max(1);
    ops::prefetch_l2(&w.q[..bytes]);
    ops::prefetch_l2(&w.d[..(rows * w.blocks_per_row()).min(w.d.len())]);
}

/// Dequantizes one row of the embedding table into `x`, block by block
/// (a packed table's row is in pieces, its scales four apart).
fn embed(x: &mut [f32], tok_emb: &QTensor, token: usize) {
    let block_bytes = tok_emb.row_bytes() / tok_emb.blocks_per_row().max(1);
    for (offset, piece) in row_pieces(tok_emb, token) {
        for (i, quants) in piece.chunks_exact(block_bytes).enumerate() {
            let b = offset / block_bytes + i;
            let (d, out) = ([scale(tok_emb, token, b)], &mut x[b * QK..(b + 1) * QK]);
            match tok_emb.wtype {
                WType::Q8_0 => dequantize_row_q8(crate::core::aligned::bytes_as_i8(quants), &d, out),
                WType::Q4_0 => dequantize_row_q4(quants, &d, out),
            }
        }
    }
}
