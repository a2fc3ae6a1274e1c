//! The instruction-counting qemu plugin (qemu/plugins/icount.c) gives exact,
//! repeatable counts: two runs of the same guest count the same, and a loop
//! run k more times costs exactly k times its body more, in the function
//! that holds it.
//!
//! Needs a C compiler and qemu-x86_64. Without them: under CI=true the test
//! fails and says what to install; locally it prints a note and passes.

use harness::icount::{self, Counts};
use harness::runner::Runner;
use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

const GUEST: &str = r#"
#include <stdlib.h>
__attribute__((noinline)) unsigned long spin(unsigned long n) {
    volatile unsigned long acc = 0;
    for (unsigned long i = 0; i < n; i++) acc += i ^ (acc >> 3);
    return acc;
}
int main(int argc, char **argv) { return (int)(spin(strtoul(argv[1], 0, 10)) & 1) * 0; }
"#;

fn have(sh: &Shell, tool: &str) -> bool {
    cmd!(sh, "{tool} --version")
        .quiet()
        .ignore_stdout()
        .ignore_stderr()
        .run()
        .is_ok()
}

#[test]
fn the_plugin_counts_exactly_and_repeatably() {
    let sh = Shell::new().unwrap();
    let missing: Vec<&str> = ["gcc", "qemu-x86_64"].into_iter().filter(|t| !have(&sh, t)).collect();
    if !missing.is_empty() {
        let msg = format!("needs {} (apt-get install gcc qemu-user)", missing.join(" and "));
        assert!(std::env::var_os("CI").is_none(), "{msg}");
        eprintln!("skipped: {msg}");
        return;
    }
    let dir = tempfile_dir();
    let plugin = icount::build_plugin(&sh, &root(), &dir).unwrap();
    let src = dir.join("guest.c");
    std::fs::write(&src, GUEST).unwrap();
    let guest = dir.join("guest");
    cmd!(sh, "gcc -O1 -static -o {guest} {src}").quiet().run().unwrap();
    let runner = Runner::Qemu {
        bin: "qemu-x86_64".into(),
        cpu: "qemu64".into(),
        cpu_arg: "qemu64".into(),
        sysroot: None,
    };
    let count = |n: u32, tag: &str| -> Counts {
        icount::run_counted(
            &runner,
            &plugin,
            &guest,
            &[n.to_string()],
            &dir.join(format!("{n}{tag}.txt")),
            60,
        )
        .unwrap()
        .0
    };
    let spin = |c: &Counts| c.functions.iter().find(|(f, _)| f == "spin").map(|f| f.1).unwrap();
    let (a, a_again) = (count(1000, ""), count(1000, "again"));
    assert_eq!(a, a_again, "two runs of the same guest must count the same");
    let (b, c) = (count(2000, ""), count(3000, ""));
    // The loop body costs the same each time: equal steps of 1000 iterations.
    assert_eq!(spin(&b) - spin(&a), spin(&c) - spin(&b));
    assert!(
        spin(&b) - spin(&a) >= 1000 * 4,
        "{} for 1000 iterations",
        spin(&b) - spin(&a)
    );
    // Everything outside `spin` (start-up, exit) is the same in all runs.
    assert_eq!(a.total - spin(&a), c.total - spin(&c));
    std::fs::remove_dir_all(&dir).ok();
}

fn tempfile_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("legacy-ml-icount-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
