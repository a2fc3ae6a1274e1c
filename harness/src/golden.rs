//! The golden logits (insta snapshots written by runtime/tests/it/golden.rs)
//! and the end-to-end comparison of DESIGN.md §7: per step,
//! max |Δ| / max |golden| ≤ tolerance, and identical greedy tokens.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// `ml logits` output, and the body of a golden snapshot.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct Logits {
    /// How to regenerate the model with `ml gen` (snapshots only).
    #[serde(default)]
    pub gen_args: Vec<String>,
    /// Or the model file, relative to the repository root (snapshots only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The prompt batch to feed it with, `ml logits --batch` (snapshots
    /// only; absent: `ml logits`'s default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<usize>,
    /// The tier that produced it (`ml logits` only).
    #[serde(default)]
    pub tier: Option<String>,
    pub tokens: Vec<u32>,
    pub steps: Vec<Step>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct Step {
    pub pos: usize,
    pub token: u32,
    /// `null` stands for a non-finite value.
    pub logits: Vec<Option<f32>>,
}

/// Parses an insta snapshot: YAML front matter between `---` lines, then
/// the JSON body.
pub fn parse_snapshot(text: &str) -> Result<Logits> {
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().unwrap_or("");
    if first.trim_end() != "---" {
        bail!("not an insta snapshot (no leading `---`)");
    }
    let mut offset = first.len();
    let mut found = false;
    for l in lines {
        offset += l.len();
        if l.trim_end() == "---" {
            found = true;
            break;
        }
    }
    if !found {
        bail!("insta header is not closed by a second `---`");
    }
    serde_json::from_str(&text[offset..]).context("snapshot body is not the expected JSON")
}

pub fn read_snapshot(path: &Path) -> Result<Logits> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    parse_snapshot(&text).with_context(|| format!("{}", path.display()))
}

/// The result of comparing one build's logits with the golden.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Comparison {
    pub ok: bool,
    pub steps: usize,
    /// Worst max |Δ| / max |golden| over the steps compared.
    pub max_rel_err: f64,
    pub worst_pos: Option<usize>,
    pub tokens_match: bool,
    /// Why it failed (empty when ok).
    pub failures: Vec<String>,
}

impl Comparison {
    pub fn summary(&self) -> String {
        if self.ok {
            format!(
                "ok: {} steps, max rel err {:.2e}, greedy tokens identical",
                self.steps, self.max_rel_err
            )
        } else {
            self.failures.iter().take(3).cloned().collect::<Vec<_>>().join("; ")
        }
    }
}

pub fn compare(golden: &Logits, got: &Logits, tolerance: f64) -> Comparison {
    let mut failures = Vec::new();
    let mut max_rel = 0.0f64;
    let mut worst_pos = None;
    let mut tokens_match = true;
    if golden.tokens != got.tokens {
        failures.push(format!(
            "prompt differs: got {:?}, golden {:?}",
            got.tokens, golden.tokens
        ));
    }
    if golden.steps.len() != got.steps.len() {
        failures.push(format!(
            "got {} steps, golden has {}",
            got.steps.len(),
            golden.steps.len()
        ));
    }
    for (w, g) in golden.steps.iter().zip(&got.steps) {
        if w.pos != g.pos {
            failures.push(format!("step at pos {} came back as pos {}", w.pos, g.pos));
        }
        if w.token != g.token {
            tokens_match = false;
            failures.push(format!(
                "greedy token differs at pos {}: got {}, golden {}",
                w.pos, g.token, w.token
            ));
        }
        if w.logits.len() != g.logits.len() {
            failures.push(format!(
                "pos {}: {} logits, golden has {}",
                w.pos,
                g.logits.len(),
                w.logits.len()
            ));
            continue;
        }
        let scale = w
            .logits
            .iter()
            .map(|v| v.map_or(f64::INFINITY, |x| (x as f64).abs()))
            .fold(0.0, f64::max);
        let mut worst = 0.0f64;
        let mut non_finite = None;
        for (i, (a, b)) in w.logits.iter().zip(&g.logits).enumerate() {
            match (a, b) {
                (Some(a), Some(b)) => worst = worst.max((*a as f64 - *b as f64).abs()),
                (_, None) => {
                    non_finite.get_or_insert(i);
                }
                (None, Some(_)) => {}
            }
        }
        if let Some(i) = non_finite {
            failures.push(format!("pos {}: logit {i} is not finite", w.pos));
            worst_pos = Some(w.pos);
            max_rel = f64::INFINITY;
            continue;
        }
        let rel = if scale > 0.0 { worst / scale } else { worst };
        if rel > max_rel || worst_pos.is_none() {
            max_rel = max_rel.max(rel);
            worst_pos = Some(w.pos);
        }
        if rel > tolerance || !rel.is_finite() {
            failures.push(format!(
                "pos {}: max |Δ| / max |golden| = {:.3e} > {:.0e} (max |Δ| {:.3e}, max |golden| {:.3e})",
                w.pos, rel, tolerance, worst, scale
            ));
        }
    }
    Comparison {
        ok: failures.is_empty(),
        steps: got.steps.len().min(golden.steps.len()),
        max_rel_err: max_rel,
        worst_pos,
        tokens_match,
        failures,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn golden() -> Logits {
        Logits {
            gen_args: vec!["--seed".into(), "1".into()],
            model: None,
            batch: None,
            tier: None,
            tokens: vec![1, 7],
            steps: vec![
                Step {
                    pos: 1,
                    token: 2,
                    logits: vec![Some(0.5), Some(-1.0), Some(4.0)],
                },
                Step {
                    pos: 2,
                    token: 0,
                    logits: vec![Some(3.0), Some(-2.0), Some(1.0)],
                },
            ],
        }
    }

    #[test]
    fn reads_an_insta_snapshot() {
        let text = "---\nsource: runtime/tests/golden.rs\nexpression: got\n---\n{\"gen_args\": [\"--seed\", \"1\"], \"tokens\": [1, 7], \"steps\": [{\"pos\": 1, \"token\": 2, \"logits\": [0.5, -1.0, 4.0]}, {\"pos\": 2, \"token\": 0, \"logits\": [3.0, -2.0, 1.0]}]}\n";
        assert_eq!(parse_snapshot(text).unwrap(), golden());
        assert!(parse_snapshot("{}").is_err());
    }

    #[test]
    fn a_snapshot_may_name_a_model_file_instead_of_gen_args() {
        let text = "---\nsource: runtime/tests/golden.rs\nexpression: got\n---\n{\"model\": \"testdata/m.mlb\", \"tokens\": [1, 7], \"steps\": []}\n";
        let g = parse_snapshot(text).unwrap();
        assert_eq!(g.model.as_deref(), Some("testdata/m.mlb"));
        assert!(g.gen_args.is_empty());
        assert_eq!(golden().model, None);
    }

    #[test]
    fn the_repositorys_snapshots_parse_and_the_trained_one_names_its_model() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let stories = read_snapshot(&root.join("golden/logits_stories260k_q8_0.snap")).unwrap();
        let file = stories.model.expect("stories260K is a file, not an ml gen model");
        assert!(root.join(&file).is_file(), "{file} is missing");
        assert_eq!(stories.steps.len(), 16);
        for name in ["logits_q8_0", "logits_q4_0"] {
            let g = read_snapshot(&root.join(format!("golden/{name}.snap"))).unwrap();
            assert!(g.model.is_none() && !g.gen_args.is_empty(), "{name}");
        }
    }

    #[test]
    fn identical_logits_pass() {
        let c = compare(&golden(), &golden(), 1e-3);
        assert!(c.ok, "{:?}", c.failures);
        assert_eq!(c.max_rel_err, 0.0);
    }

    #[test]
    fn within_tolerance_passes() {
        let mut got = golden();
        got.steps[0].logits[0] = Some(0.5 + 0.0039); // 0.0039 / 4.0 < 1e-3
        let c = compare(&golden(), &got, 1e-3);
        assert!(c.ok, "{:?}", c.failures);
        assert!((c.max_rel_err - 0.0039 / 4.0).abs() < 1e-6);
    }

    #[test]
    fn logits_beyond_tolerance_fail_with_the_figure() {
        let mut got = golden();
        got.steps[1].logits[2] = Some(1.0 + 0.01); // 0.01 / 3.0 = 3.3e-3
        let c = compare(&golden(), &got, 1e-3);
        assert!(!c.ok);
        assert!(c.tokens_match);
        assert_eq!(c.worst_pos, Some(2));
        assert!(
            c.summary().contains("pos 2: max |Δ| / max |golden| = 3.333e-3 > 1e-3"),
            "{}",
            c.summary()
        );
    }

    #[test]
    fn a_different_greedy_token_fails() {
        let mut got = golden();
        got.steps[0].token = 1;
        let c = compare(&golden(), &got, 1e-3);
        assert!(!c.ok);
        assert!(!c.tokens_match);
        assert!(
            c.summary().contains("greedy token differs at pos 1: got 1, golden 2"),
            "{}",
            c.summary()
        );
    }

    #[test]
    fn non_finite_and_missing_steps_fail() {
        let mut got = golden();
        got.steps[0].logits[1] = None;
        let c = compare(&golden(), &got, 1e-3);
        assert!(!c.ok);
        assert!(c.summary().contains("logit 1 is not finite"));
        let mut got = golden();
        got.steps.pop();
        let c = compare(&golden(), &got, 1e-3);
        assert!(!c.ok);
        assert!(c.summary().contains("got 1 steps, golden has 2"));
    }
}
