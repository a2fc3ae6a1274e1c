//! `ml bench`'s output: the tables, or one JSON object (`--json`, read by
//! ci/bench-table and the harness's matrix).

use super::roofline::DECODE_CHUNK;
use super::Report;
use crate::cli::stdout_error;
use legacy_ml::kernels;
use legacy_ml::Result;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;

/// How the matrices of a model read into memory, and the kernel rows' own,
/// are laid out on this CPU (`model::streaming::streaming`).
fn matrix_order() -> &'static str {
    match (
        legacy_ml::model::streaming::streaming().pack_row_groups,
        kernels::PACKS_ROW_GROUPS,
    ) {
        (true, _) => "matrices packed in four-row groups",
        (false, true) => "matrices row-major (this CPU streams them faster so; ML_PACK=1 packs them)",
        (false, false) => "matrices row-major",
    }
}

/// `x` to `digits` decimals: the precision the JSON has always printed.
/// serde_json writes a non-finite value as `null`.
fn round(x: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (x * scale).round() / scale
}

#[derive(Serialize)]
struct JsonReport<'a> {
    tier: &'a str,
    packed_matrices: bool,
    threads: usize,
    /// Keyed by thread count: "1", and `threads` (one key when that is 1).
    bandwidth_gb_per_s: BTreeMap<String, f64>,
    kernels: Vec<JsonKernel<'a>>,
    /// llama-bench's tests: ppN and tgN per thread count.
    speed: Vec<JsonSpeed<'a>>,
    model: Option<JsonModel<'a>>,
}

#[derive(Serialize)]
struct JsonSpeed<'a> {
    threads: usize,
    test: &'a str,
    tokens: usize,
    batch: usize,
    /// Mean over the runs, and their sample standard deviation.
    tok_per_s: f64,
    stdev: f64,
    runs: usize,
}

#[derive(Serialize)]
struct JsonKernel<'a> {
    kernel: &'a str,
    shape: &'a str,
    threads: usize,
    bytes: usize,
    ops: usize,
    seconds: f64,
    gb_per_s: f64,
    gops: f64,
    bandwidth_fraction: f64,
}

#[derive(Serialize)]
struct JsonModel<'a> {
    path: &'a str,
    wtype: &'a str,
    threads: usize,
    weight_bytes_per_token: usize,
    prompt_tokens: usize,
    prompt_batch: usize,
    prompt_tok_per_s: f64,
    decode_tokens: usize,
    decode_tok_per_s: f64,
    decode_bandwidth_gb_per_s: f64,
    roofline_tok_per_s: f64,
    roofline_fraction: f64,
    peak_roofline_fraction: f64,
}

fn json_value<'a>(report: &'a Report, tier: &'a str, packed: bool) -> JsonReport<'a> {
    let threads = report.threads;
    let bandwidth_gb_per_s = [(1, report.bw1), (threads, report.bwn)]
        .into_iter()
        .map(|(t, gbps)| (t.to_string(), round(gbps, 6)))
        .collect();
    let kernels = report
        .kernels
        .iter()
        .map(|r| JsonKernel {
            kernel: &r.kernel,
            shape: &r.shape,
            threads: r.threads,
            bytes: r.bytes,
            ops: r.ops,
            seconds: r.seconds,
            gb_per_s: round(r.gbps(), 3),
            gops: round(r.gops(), 3),
            bandwidth_fraction: round(r.gbps() / report.bandwidth(r.threads), 4),
        })
        .collect();
    let model = report.model.as_ref().map(|m| JsonModel {
        path: &m.path,
        wtype: m.wtype,
        threads,
        weight_bytes_per_token: m.bytes_per_token,
        prompt_tokens: m.prompt_tokens,
        prompt_batch: m.prompt_batch,
        prompt_tok_per_s: round(m.prompt_tok_s, 3),
        decode_tokens: m.decode_tokens,
        decode_tok_per_s: round(m.decode_tok_s, 3),
        decode_bandwidth_gb_per_s: round(m.decode_bandwidth_gbps, 6),
        roofline_tok_per_s: round(m.roofline_tok_s(), 3),
        roofline_fraction: round(m.decode_tok_s / m.roofline_tok_s(), 4),
        peak_roofline_fraction: round(m.decode_tok_s / m.roofline_tok_s_at(report.bandwidth(threads)), 4),
    });
    let speed = report
        .speed
        .iter()
        .map(|r| JsonSpeed {
            threads: r.threads,
            test: &r.test,
            tokens: r.tokens,
            batch: r.batch,
            tok_per_s: round(r.mean(), 3),
            stdev: round(r.stdev(), 3),
            runs: r.runs.len(),
        })
        .collect();
    JsonReport {
        tier,
        packed_matrices: packed,
        threads,
        bandwidth_gb_per_s,
        kernels,
        speed,
        model,
    }
}

/// One line of JSON.
pub(super) fn json(out: &mut dyn Write, report: &Report) -> Result<()> {
    let v = json_value(
        report,
        kernels::TIER,
        legacy_ml::model::streaming::streaming().pack_row_groups,
    );
    let text = serde_json::to_string(&v).expect("serialising plain structs cannot fail");
    writeln!(out, "{text}").map_err(stdout_error)
}

/// The tables.
pub(super) fn text(out: &mut dyn Write, report: &Report) -> Result<()> {
    let w = |out: &mut dyn Write, s: String| writeln!(out, "{s}").map_err(stdout_error);
    let threads = report.threads;
    let (bw1, bwn) = (report.bw1, report.bwn);
    w(out, format!("tier: {}; {}", kernels::TIER, matrix_order()))?;
    w(
        out,
        format!("memory read bandwidth: {bw1:.2} GB/s (1 thread), {bwn:.2} GB/s ({threads} threads)"),
    )?;
    if !report.kernels.is_empty() {
        w(out, String::new())?;
        w(
            out,
            format!(
                "{:<15} {:<35} {:>3} {:>10} {:>8} {:>8} {:>7}",
                "kernel", "shape", "thr", "time (us)", "GB/s", "GOPS", "of bw"
            ),
        )?;
        for r in &report.kernels {
            w(
                out,
                format!(
                    "{:<15} {:<35} {:>3} {:>10.2} {:>8.2} {:>8.2} {:>6.0}%",
                    r.kernel,
                    r.shape,
                    r.threads,
                    r.seconds * 1e6,
                    r.gbps(),
                    r.gops(),
                    100.0 * r.gbps() / report.bandwidth(r.threads)
                ),
            )?;
        }
    }
    if let Some(m) = &report.model {
        w(out, String::new())?;
        w(
            out,
            format!(
                "model {} ({}), {:.1} MB of weights per token",
                m.path,
                m.wtype,
                m.bytes_per_token as f64 / 1e6
            ),
        )?;
        if !report.speed.is_empty() {
            w(out, String::new())?;
            w(
                out,
                format!("| {:>7} | {:>5} | {:>7} | {:>18} |", "threads", "batch", "test", "t/s"),
            )?;
            w(out, "| ------: | ----: | ------: | -----------------: |".to_string())?;
            for r in &report.speed {
                let tps = format!("{:.2} ± {:.2}", r.mean(), r.stdev());
                w(
                    out,
                    format!("| {:>7} | {:>5} | {:>7} | {:>18} |", r.threads, r.batch, r.test, tps),
                )?;
            }
            w(out, String::new())?;
        }
        w(
            out,
            format!(
                "roofline run: a {}-token prompt at {:.1} tok/s (batch {})",
                m.prompt_tokens, m.prompt_tok_s, m.prompt_batch
            ),
        )?;
        w(
            out,
            format!(
                "decode: {} tokens at {:.1} tok/s on {threads} thread(s); roofline {:.1} tok/s at {:.2} GB/s; {:.0}% of it",
                m.decode_tokens,
                m.decode_tok_s,
                m.roofline_tok_s(),
                m.decode_bandwidth_gbps,
                100.0 * m.decode_tok_s / m.roofline_tok_s()
            ),
        )?;
        w(
            out,
            format!(
                "  (bandwidth of a bare sum over the same weights, a pass between every {DECODE_CHUNK} decoded \
                 tokens; against the probe's peak {:.2} GB/s the decode reached {:.0}%)",
                report.bandwidth(threads),
                100.0 * m.decode_tok_s / m.roofline_tok_s_at(report.bandwidth(threads))
            ),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::measure::KernelRow;
    use super::super::roofline::ModelRun;
    use super::*;

    fn report(path: &str, threads: usize, decode_bandwidth_gbps: f64) -> Report {
        Report {
            threads,
            bw1: 10.0,
            bwn: 20.0,
            kernels: vec![KernelRow {
                kernel: "matvec_q8_0".into(),
                shape: "4096x4096 (4096x4096) cold".into(),
                threads: 1,
                bytes: 1 << 20,
                ops: 2 << 20,
                seconds: 1e-4,
            }],
            model: Some(ModelRun {
                path: path.into(),
                wtype: "q8_0",
                bytes_per_token: 1_000_000,
                prompt_tokens: 16,
                prompt_batch: 32,
                prompt_tok_s: 123.456_789,
                decode_tokens: 64,
                decode_tok_s: 100.0,
                decode_bandwidth_gbps,
            }),
            speed: vec![super::super::speed::SpeedRow {
                threads: 2,
                test: "pp128".into(),
                tokens: 128,
                batch: 32,
                runs: vec![300.0, 310.0, 320.0],
            }],
        }
    }

    fn parse(r: &Report) -> serde_json::Value {
        let mut out = Vec::new();
        json(&mut out, r).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.ends_with('\n') && text.trim_end().lines().count() == 1, "{text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
    }

    /// Debug escaping (`{:?}`) wrote `\u{200b}` for a zero-width space and
    /// U+007F, which JSON does not know.
    #[test]
    fn a_path_with_quotes_backslashes_and_non_ascii_is_valid_json() {
        let path = "dir \"q\"\\ü\u{200b}\u{7f}\u{1F600}\t/m.mlb";
        let v = parse(&report(path, 4, 2.0));
        let m = &v["model"];
        assert_eq!(m["path"], path);
        assert_eq!(m["wtype"], "q8_0");
        assert_eq!(m["threads"], 4);
        assert_eq!(m["weight_bytes_per_token"], 1_000_000);
        assert_eq!(m["prompt_tok_per_s"], 123.457);
        assert_eq!(m["prompt_batch"], 32);
        // 2 GB/s over 1 MB per token: 2000 tok/s, of which 100 is 5%; the
        // probe's 20 GB/s (4 threads) allows 20000.
        assert_eq!(m["roofline_tok_per_s"], 2000.0);
        assert_eq!(m["roofline_fraction"], 0.05);
        assert_eq!(m["peak_roofline_fraction"], 0.005);
        assert_eq!(v["threads"], 4);
        assert_eq!(v["bandwidth_gb_per_s"]["1"], 10.0);
        assert_eq!(v["bandwidth_gb_per_s"]["4"], 20.0);
        let pp = &v["speed"][0];
        assert_eq!(
            (&pp["test"], &pp["threads"], &pp["tokens"], &pp["batch"], &pp["runs"]),
            (&"pp128".into(), &2.into(), &128.into(), &32.into(), &3.into())
        );
        assert_eq!((&pp["tok_per_s"], &pp["stdev"]), (&310.0.into(), &10.0.into()));
        let k = &v["kernels"][0];
        assert_eq!(k["shape"], "4096x4096 (4096x4096) cold");
        assert_eq!(k["seconds"], 1e-4);
        assert_eq!(k["gb_per_s"], 10.486);
        assert_eq!(k["bandwidth_fraction"], 1.0486);
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        for key in [
            "tier",
            "packed_matrices",
            "threads",
            "bandwidth_gb_per_s",
            "kernels",
            "speed",
            "model",
        ] {
            assert!(keys.contains(&key), "{key} missing from {keys:?}");
        }
    }

    /// One thread: one bandwidth key, not "1" twice; no model: `null`; a
    /// fraction of a zero roofline is not a number JSON could hold.
    #[test]
    fn one_thread_no_model_and_infinities_stay_json() {
        let mut r = report("m.mlb", 1, 0.0);
        let v = parse(&r);
        assert_eq!(v["bandwidth_gb_per_s"].as_object().unwrap().len(), 1);
        assert!(v["model"]["roofline_fraction"].is_null());
        r.model = None;
        assert!(parse(&r)["model"].is_null());
    }
}
