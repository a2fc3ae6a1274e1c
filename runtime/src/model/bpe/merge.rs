//! BPE merging: one piece's bytes to ids, adjacent pairs merged by rank.

use super::{Bpe, NONE};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Reused buffers of `merge_piece`: symbol ids (`NONE` once merged away)
/// and the linked list of the live symbols.
#[derive(Default)]
pub(super) struct Scratch {
    ids: Vec<u32>,
    next: Vec<usize>,
    prev: Vec<usize>,
    heap: BinaryHeap<Reverse<(u32, usize, u32, u32)>>,
}

impl Bpe {
    pub(super) fn encode_ordinary_into(&self, text: &str, out: &mut Vec<u32>, scratch: &mut Scratch) {
        if text.is_empty() {
            return;
        }
        let mut pieces = Vec::new();
        self.pre.split(text, &mut pieces);
        for piece in pieces {
            self.merge_piece(piece.as_bytes(), out, scratch);
        }
    }

    /// BPE on one piece: one symbol per byte, then repeatedly the adjacent
    /// pair of lowest rank (leftmost among equals) is merged. A heap of
    /// candidate pairs keeps this O(n log n); entries made stale by a merge
    /// next to them are recognised by their ids and skipped. This picks the
    /// same pair as rescanning every pair each round.
    fn merge_piece(&self, piece: &[u8], out: &mut Vec<u32>, s: &mut Scratch) {
        s.ids.clear();
        s.ids.extend(
            piece
                .iter()
                .map(|&b| self.byte_ids[b as usize])
                .filter(|&id| id != NONE),
        );
        let n = s.ids.len();
        if n <= 1 {
            out.extend_from_slice(&s.ids);
            return;
        }
        s.next.clear();
        s.next.extend(1..=n);
        s.prev.clear();
        s.prev.extend((0..n).map(|i| i.wrapping_sub(1)));
        s.heap.clear();
        for i in 0..n - 1 {
            if let Some(&(rank, merged)) = self.merges.get(&(s.ids[i], s.ids[i + 1])) {
                s.heap.push(Reverse((rank, i, merged, s.ids[i + 1])));
            }
        }
        while let Some(Reverse((rank, i, merged, right))) = s.heap.pop() {
            // Stale: i was merged into its left neighbour, or its right
            // neighbour changed, since this entry was pushed.
            let j = s.next[i];
            if s.ids[i] == NONE || j >= n || s.ids[j] != right {
                continue;
            }
            if self.merges.get(&(s.ids[i], right)) != Some(&(rank, merged)) {
                continue;
            }
            s.ids[i] = merged;
            s.ids[j] = NONE;
            let k = s.next[j];
            s.next[i] = k;
            if k < n {
                s.prev[k] = i;
                if let Some(&(rank, m)) = self.merges.get(&(merged, s.ids[k])) {
                    s.heap.push(Reverse((rank, i, m, s.ids[k])));
                }
            }
            let p = s.prev[i];
            if p < n {
                if let Some(&(rank, m)) = self.merges.get(&(s.ids[p], merged)) {
                    s.heap.push(Reverse((rank, p, m, merged)));
                }
            }
        }
        let mut i = 0;
        while i < n {
            out.push(s.ids[i]);
            i = s.next[i];
        }
    }
}
