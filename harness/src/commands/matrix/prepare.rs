//! Stage 1: what every row shares, made once before the first row. Set-up
//! (what each selected row needs, installing what can be installed), the
//! instruction-count plugin, the Wine prefix of the Windows rows, and the
//! models (the golden ones and the bench model, by a host scalar `ml gen`),
//! gathered in a `Ctx` that the later stages only read.

use super::MatrixArgs;
use crate::builder::{self, BuilderKind, BuiltRow};
use crate::config::{Host, Matrix, Row};
use crate::golden::{self, Logits};
use crate::icount;
use crate::isa::Arch;
use crate::progress::Progress;
use crate::runner::Runner;
use crate::setup::{self, Need};
use crate::wine;
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;
use xshell::{cmd, Shell};

/// One golden and the model it needs.
pub struct Gold {
    pub name: String,
    pub path: String,
    pub logits: Logits,
    pub model: PathBuf,
}

/// What every row and cell shares.
pub struct Ctx<'a> {
    pub root: &'a Path,
    pub matrix: &'a Matrix,
    pub kind: BuilderKind,
    pub quick: bool,
    pub jobs: usize,
    pub host_triple: String,
    pub host_arch: Option<Arch>,
    pub host_features: Vec<String>,
    pub runtime_features: Vec<String>,
    pub golds: Vec<Gold>,
    pub gold_error: Option<String>,
    /// The instruction-counting qemu plugin, or why there is none.
    pub icount_plugin: std::result::Result<PathBuf, String>,
    pub progress: &'a Progress,
    /// The Wine prefix of the Windows rows (a Linux host with any selected),
    /// or why it could not be prepared.
    pub wine: Option<std::result::Result<wine::Prepared, String>>,
}

impl Ctx<'_> {
    /// The environment of every run on `runner`.
    pub fn run_env(&self, runner: &Runner) -> Vec<(String, String)> {
        vec![
            // tests/it/support.rs starts the target `ml` through this under emulation.
            ("ML_TEST_RUNNER".into(), runner.test_runner()),
            ("INSTA_WORKSPACE_ROOT".into(), self.root.display().to_string()),
            // Never write .snap.new files into golden/ from a matrix run.
            ("INSTA_UPDATE".into(), "no".into()),
            ("INSTA_FORCE_PASS".into(), "0".into()),
            // stdarch's rule: tests must not skip on a CPU expected to pass.
            ("ML_TEST_EVERYTHING".into(), "1".into()),
            ("RUST_BACKTRACE".into(), "0".into()),
        ]
    }

    pub fn timeout(&self) -> u64 {
        self.matrix.settings.timeout_secs
    }

    /// The target dir of the host scalar `ml` that generates the models: the
    /// host scalar row's if the matrix has one, so it is built only once.
    pub fn gen_dir_name(&self) -> String {
        self.matrix
            .rows
            .iter()
            .find(|r| {
                r.tier == "scalar" && r.target == self.host_triple && r.rustflags.is_empty() && r.features.is_empty()
            })
            .map(|r| r.name.clone())
            .unwrap_or_else(|| "_gen".into())
    }

    /// The host-built scalar `ml` used for `ml gen`.
    pub fn gen_ml_path(&self) -> PathBuf {
        builder::target_dir(self.root, &self.gen_dir_name())
            .join(&self.host_triple)
            .join("release")
            .join(builder::exe_name("ml", &self.host_triple))
    }

    /// The `ml gen` build as a built row, a seed for the rows' target dirs.
    pub fn gen_row(&self) -> BuiltRow {
        BuiltRow {
            name: self.gen_dir_name(),
            target: self.host_triple.clone(),
            rustflags: vec![],
        }
    }

    /// The stories15M-shaped model `ml bench` times (`BENCH_GEN_ARGS`).
    pub fn bench_model(&self) -> PathBuf {
        self.root.join("target/matrix/_models/bench_stories15m_q8_0.mlb")
    }
}

/// What `prepare` starts from.
pub struct Inputs<'a> {
    pub root: &'a Path,
    pub matrix: &'a Matrix,
    pub host: &'a Host,
    pub selected: &'a [&'a Row],
    pub kind: BuilderKind,
    pub args: &'a MatrixArgs,
    /// The cells `--native-from-host` changed, for the report's set-up list.
    pub native_changes: &'a [String],
    pub progress: &'a Progress,
}

/// What `prepare` made.
pub struct Prepared<'a> {
    pub ctx: Ctx<'a>,
    /// Per selected row (same order): what it needs and whether it is here.
    pub needs: Vec<Vec<Need>>,
    /// What set-up did, for the report.
    pub setup_actions: Vec<String>,
    /// (tool, version line) pairs, for the report.
    pub toolchain: Vec<(String, String)>,
    /// Per target triple, how its cells ran when that needs saying.
    pub target_notes: BTreeMap<String, String>,
}

pub fn prepare<'a>(sh: &Shell, inp: Inputs<'a>) -> Result<Prepared<'a>> {
    let Inputs {
        root,
        matrix,
        host,
        selected,
        kind,
        args,
        native_changes,
        progress,
    } = inp;
    let host_triple = host_triple(sh)?;

    // Set-up: what each row needs, installing what we can, then looked at
    // again (what is there now).
    let row_needs = |targets: &[String]| -> Vec<Vec<Need>> {
        selected
            .iter()
            .map(|r| setup::needs(sh, r, matrix, kind, &host_triple, targets))
            .collect()
    };
    let needs = row_needs(&setup::installed_targets(sh));
    let mut setup_actions = setup::ensure(sh, &needs, !args.no_install, progress)?;
    let needs = row_needs(&setup::installed_targets(sh));
    if setup_actions.is_empty() {
        setup_actions.push("nothing to install".into());
    }
    setup_actions.extend(native_changes.iter().map(|c| format!("--native-from-host: {c}")));
    let toolchain = setup::tool_versions(sh, matrix);

    let mut ctx = Ctx {
        root,
        matrix,
        kind,
        quick: args.quick,
        jobs: args.jobs.max(1),
        host_triple: host_triple.clone(),
        host_arch: host.arch,
        host_features: host.features.clone(),
        runtime_features: runtime_features(root)?,
        golds: Vec::new(),
        gold_error: None,
        icount_plugin: Err("not built".into()),
        progress,
        wine: None,
    };
    ctx.icount_plugin = icount::build_plugin(sh, root, &root.join("target/matrix/_icount")).map_err(|e| {
        progress.done("icount", "plugin", 0.0, &format!("not built: {e:#}"));
        format!("{e:#}")
    });

    // One Wine prefix for every Windows row that has what it needs.
    let mut target_notes = BTreeMap::new();
    if let Some((row, _)) = selected
        .iter()
        .zip(&needs)
        .find(|(r, n)| under_wine(r) && n.iter().all(|n| n.present))
    {
        let bin = matrix.target[&row.target].wine.clone().unwrap_or_default();
        progress.step("wine", "prepare the prefix (target/matrix/_wine)");
        let t = Instant::now();
        let prepared = wine::prepare(sh, root, &bin).map_err(|e| format!("{e:#}"));
        let outcome = match &prepared {
            Ok(p) => p.note.clone(),
            Err(e) => format!("FAILED: {e}"),
        };
        progress.done("wine", "prefix", t.elapsed().as_secs_f64(), &outcome);
        setup_actions.push(format!("wine: {outcome}"));
        for r in selected.iter().filter(|r| under_wine(r)) {
            target_notes.insert(
                r.target.clone(),
                format!("`native` ran under Wine on this host's CPU ({outcome})."),
            );
        }
        ctx.wine = Some(prepared);
    }

    for r in selected.iter() {
        let qemu = &matrix.target[&r.target].qemu;
        if let Some(tunables) = crate::runner::qemu_glibc_tunables(qemu) {
            target_notes.entry(r.target.clone()).or_insert_with(|| {
                format!(
                    "qemu cells ran with `GLIBC_TUNABLES={tunables}`: the guest's glibc keeps to its \
                     baseline string and memory routines, whose AVX2 and A64FX variants qemu 7.2 runs \
                     about ten times slower; the runtime's own code, its guard and the CPU model are \
                     unchanged (qemu/README.md)."
                )
            });
        }
    }

    // The golden models, generated by a host scalar `ml gen`.
    match golden_models(sh, &ctx) {
        Ok(g) => ctx.golds = g,
        Err(e) => {
            progress.done("golden", "prepare", 0.0, &format!("FAILED: {e:#}"));
            ctx.gold_error = Some(format!("{e:#}"));
        }
    }
    Ok(Prepared {
        ctx,
        needs,
        setup_actions,
        toolchain,
        target_notes,
    })
}

/// Whether this host runs a row's `native` cells under Wine: a Windows
/// row on a host that is not Windows.
pub fn under_wine(row: &Row) -> bool {
    row.is_windows() && !cfg!(windows)
}

/// Ends the Wine prefix's processes: none outlives the matrix.
pub fn stop_wine(ctx: &Ctx, selected: &[&Row]) {
    if let Some(Ok(w)) = &ctx.wine {
        let bin = selected
            .iter()
            .find_map(|r| ctx.matrix.target.get(&r.target).and_then(|t| t.wine.clone()))
            .unwrap_or_default();
        wine::stop(&bin, &w.prefix);
    }
}

pub fn root_dir() -> PathBuf {
    // The checkout the harness was built from; `cargo run -p harness` runs
    // it from anywhere inside.
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let compiled = manifest.parent().unwrap_or(manifest).to_path_buf();
    if let Ok(cwd) = std::env::current_dir() {
        for dir in cwd.ancestors() {
            if dir.join("matrix.toml").exists() && dir.join("runtime/Cargo.toml").exists() {
                return dir.to_path_buf();
            }
        }
    }
    compiled
}

pub fn host_triple(sh: &Shell) -> Result<String> {
    let v = cmd!(sh, "rustc -vV").quiet().read().context("rustc -vV")?;
    v.lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(|s| s.trim().to_string())
        .context("rustc -vV printed no host line")
}

/// The runtime's cargo features, from runtime/Cargo.toml.
pub fn runtime_features(root: &Path) -> Result<Vec<String>> {
    let path = root.join("runtime/Cargo.toml");
    let text = std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
    let t: toml::Table = toml::from_str(&text).with_context(|| format!("parse {}", path.display()))?;
    Ok(t.get("features")
        .and_then(|f| f.as_table())
        .map(|f| f.keys().cloned().collect())
        .unwrap_or_default())
}

#[cfg(unix)]
pub fn no_core_dumps() {
    // qemu-user writes a core file for a guest that dies of a signal.
    let lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: setrlimit with a valid pointer to an initialised rlimit.
    unsafe {
        libc::setrlimit(libc::RLIMIT_CORE, &lim);
    }
}

#[cfg(not(unix))]
pub fn no_core_dumps() {}

/// Builds the host scalar `ml`, then generates with it each golden's model
/// (a model of the repository is used in place) and the bench model.
pub fn golden_models(sh: &Shell, ctx: &Ctx) -> Result<Vec<Gold>> {
    let t = Instant::now();
    ctx.progress.step("golden", "build host scalar ml (for ml gen)");
    let dir = builder::target_dir(ctx.root, &ctx.gen_dir_name());
    let triple = &ctx.host_triple;
    let out = cmd!(
        sh,
        "cargo build --release -p runtime --bin ml --target {triple} --target-dir {dir}"
    )
    .env("CARGO_ENCODED_RUSTFLAGS", "")
    .quiet()
    .ignore_status()
    .output()?;
    if !out.status.success() {
        bail!(
            "host scalar ml build failed: {}",
            builder::tail(&String::from_utf8_lossy(&out.stderr), 12)
        );
    }
    let ml = ctx.gen_ml_path();
    let models = ctx.root.join("target/matrix/_models");
    std::fs::create_dir_all(&models)?;
    let mut golds = Vec::new();
    for rel in &ctx.matrix.settings.golden {
        let path = ctx.root.join(rel);
        let logits = golden::read_snapshot(&path)?;
        let name = Path::new(rel)
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or(rel)
            .to_string();
        let model = match &logits.model {
            // A model of the repository (the trained stories260K) is used in place.
            Some(file) => {
                let model = ctx.root.join(file);
                if !model.is_file() {
                    bail!("{rel} names the model {file}, which is not in the repository");
                }
                model
            }
            None => {
                let model = models.join(format!("{name}.mlb"));
                let gen_args = &logits.gen_args;
                let out = cmd!(sh, "{ml} gen --out {model} {gen_args...}")
                    .quiet()
                    .ignore_status()
                    .output()?;
                if !out.status.success() {
                    bail!(
                        "ml gen --out {} {}: {}",
                        model.display(),
                        gen_args.join(" "),
                        String::from_utf8_lossy(&out.stderr).trim()
                    );
                }
                model
            }
        };
        golds.push(Gold {
            name,
            path: rel.clone(),
            logits,
            model,
        });
    }
    // A stories15M-shaped model for `ml bench` (decode speed per tier).
    let bench = ctx.bench_model();
    let bench_args = BENCH_GEN_ARGS;
    let out = cmd!(sh, "{ml} gen --out {bench} {bench_args...}")
        .quiet()
        .ignore_status()
        .output()?;
    if !out.status.success() {
        ctx.progress.done(
            "golden",
            "bench model",
            0.0,
            &format!("not generated: {}", String::from_utf8_lossy(&out.stderr).trim()),
        );
    }
    ctx.progress.done(
        "golden",
        "models generated",
        t.elapsed().as_secs_f64(),
        &format!("{} golden", golds.len()),
    );
    Ok(golds)
}

/// `ml gen` arguments of the bench model: stories15M's shape (dim 288,
/// 6 layers, 6 heads, hidden 768, vocab 32000), Q8_0 weights.
pub const BENCH_GEN_ARGS: &[&str] = &[
    "--seed",
    "7",
    "--wtype",
    "q8_0",
    "--dim",
    "288",
    "--layers",
    "6",
    "--heads",
    "6",
    "--kv-heads",
    "6",
    "--hidden",
    "768",
    "--vocab",
    "32000",
    "--max-seq",
    "256",
];
