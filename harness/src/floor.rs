//! `below-floor` cells: a CPU below the target's own floor (an ARMv6 core
//! running an ARMv7 build), where the C library's start-up code faults
//! before anything of the project can run, so no guard can refuse cleanly.
//!
//! Such a cell is met only with evidence, from qemu's own trace
//! (`-d page,in_asm,nochain -strace -D <log>`), that the process died of
//! SIGILL before a single instruction of the executable ran: qemu logs the
//! executable's code range (`start_code`, `end_code`) and the entry point
//! (the dynamic loader's, for a dynamically linked binary), every block it
//! translates (so every block that starts to run) and the SIGILL with its
//! address. The fault must lie outside the executable's code and no block
//! may lie inside it. Anything else (a clean run, another end, a fault in
//! the executable, even in its C start-up objects) fails the cell.

use crate::outcome::RunOutput;
use serde::{Deserialize, Serialize};

/// qemu options that write the trace `check` reads to `log`.
pub fn qemu_trace_args(log: &str) -> Vec<String> {
    ["-d", "page,in_asm,nochain", "-strace", "-D", log]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// What the trace proves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    pub fault_addr: u64,
    /// `the dynamic loader` (the mapping of the entry point) or `a shared
    /// library`.
    pub fault_in: String,
    pub code_start: u64,
    pub code_end: u64,
    pub entry: u64,
    /// Translated blocks before the fault (all outside the executable).
    pub blocks: usize,
    /// System calls before the fault.
    pub syscalls: usize,
}

impl Evidence {
    pub fn summary(&self) -> String {
        format!(
            "SIGILL at {:#x} in {} after {} block(s) and {} system call(s); no instruction of the executable (code {:#x}-{:#x}) ran",
            self.fault_addr, self.fault_in, self.blocks, self.syscalls, self.code_start, self.code_end
        )
    }
}

fn hex_after(log: &str, key: &str) -> Option<u64> {
    log.lines().find_map(|l| {
        let v = l.strip_prefix(key)?.trim();
        u64::from_str_radix(v.strip_prefix("0x")?, 16).ok()
    })
}

/// The r-x mappings of qemu's last page table dump (`start-end size prot`).
fn exec_mappings(log: &str) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for l in log.lines() {
        if l.starts_with("page layout changed") {
            out.clear();
            continue;
        }
        let mut f = l.split_whitespace();
        let (Some(range), Some(_size), Some(prot)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let Some((a, b)) = range.split_once('-') else { continue };
        if let (Ok(a), Ok(b), true) = (
            u64::from_str_radix(a, 16),
            u64::from_str_radix(b, 16),
            prot.contains('x'),
        ) {
            out.push((a, b));
        }
    }
    out
}

/// Checks a run on a `below-floor` cell against its qemu trace.
pub fn check(o: &RunOutput, log: &str) -> Result<Evidence, String> {
    if !o.sigill() {
        return Err(match (o.code, o.signal) {
            (Some(0), _) => "it ran (exit 0): this CPU is not below the build's floor, expect pass".into(),
            (Some(7), _) => "the guard refused it (exit 7): the start-up path reached the guard, expect reject".into(),
            _ => format!("{}, not the SIGILL of a below-floor start-up", o.describe()),
        });
    }
    let (Some(code_start), Some(code_end), Some(entry)) = (
        hex_after(log, "start_code"),
        hex_after(log, "end_code"),
        hex_after(log, "entry"),
    ) else {
        return Err("qemu's trace has no start_code/end_code/entry (-d page): cannot tell where the fault is".into());
    };
    let inside = |a: u64| (code_start..code_end).contains(&a);
    let mut blocks = 0;
    let mut syscalls = 0;
    let mut fault = None;
    for l in log.lines() {
        if l.starts_with("IN:") {
            blocks += 1;
        } else if let Some(addr) = l.strip_prefix("0x").and_then(|r| r.split(':').next()) {
            let Ok(a) = u64::from_str_radix(addr, 16) else { continue };
            if inside(a) {
                return Err(format!(
                    "the executable's instruction at {a:#x} ran before the fault: this is not a start-up fault"
                ));
            }
        } else if let Some(rest) = l.strip_prefix("--- SIGILL {") {
            fault = rest
                .split([',', '}'])
                .find_map(|kv| kv.trim().strip_prefix("si_addr=0x"))
                .and_then(|a| u64::from_str_radix(a, 16).ok());
            break;
        } else if l
            .split_once(' ')
            .is_some_and(|(pid, call)| !pid.is_empty() && pid.chars().all(|c| c.is_ascii_digit()) && call.contains('('))
        {
            syscalls += 1;
        }
    }
    let Some(fault_addr) = fault else {
        return Err("qemu's trace shows no SIGILL with its address (-strace)".into());
    };
    if inside(fault_addr) {
        return Err(format!(
            "the SIGILL at {fault_addr:#x} is in the executable's own code ({code_start:#x}-{code_end:#x})"
        ));
    }
    if inside(entry) {
        return Err(format!(
            "the entry point {entry:#x} is the executable's own (a static binary): its start-up code is the project's build"
        ));
    }
    let maps = exec_mappings(log);
    let of = |a: u64| maps.iter().find(|(s, e)| (*s..*e).contains(&a)).copied();
    let fault_in = match (of(fault_addr), of(entry)) {
        (Some(f), Some(e)) if f == e => "the dynamic loader".to_string(),
        (Some(_), _) => "a shared library".to_string(),
        (None, _) => {
            return Err(format!(
                "the SIGILL at {fault_addr:#x} lies in no executable mapping of qemu's page table"
            ))
        }
    };
    Ok(Evidence {
        fault_addr,
        fault_in,
        code_start,
        code_end,
        entry,
        blocks,
        syscalls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What qemu-arm 7.2 -cpu arm1176 logged for the armv7 `ml isa`
    /// (Debian's armhf ld.so is Thumb-2), shortened.
    const LOG: &str = "\
page layout changed following binary load
start    end      size     prot
3f7df000-3f7e0000 00001000 r-x
3f7e0000-3f7fd000 0001d000 r-x
3f7fd000-3f7ff000 00002000 rw-
40000000-4010f000 0010f000 r-x
4010f000-40115000 00006000 rw-
ffff0000-ffff1000 00001000 r-x
start_brk   0x00000000
end_code    0x4010ef00
start_code  0x40000000
start_data  0x4010f598
entry       0x3f7f0760
----------------
IN: 
0x3f7f0760:  e59fa03c  ldr      sl, [pc, #0x3c]
0x3f7f0768:  fa000193  blx      #0x3f7f0dbc

----------------
IN: 
0x3f7f09c4:  f81bd037  .byte    0x37, 0xd0, 0x1b, 0xf8

--- SIGILL {si_signo=SIGILL, si_code=2, si_addr=0x3f7f09c4} ---
";

    fn sigill() -> RunOutput {
        RunOutput {
            signal: Some(4),
            stderr: "qemu: uncaught target signal 4 (Illegal instruction) - core dumped".into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_fault_in_the_loader_before_the_executable_is_below_floor() {
        let e = check(&sigill(), LOG).unwrap();
        assert_eq!(e.fault_addr, 0x3f7f09c4);
        assert_eq!(e.fault_in, "the dynamic loader");
        assert_eq!(
            (e.code_start, e.code_end, e.entry),
            (0x40000000, 0x4010ef00, 0x3f7f0760)
        );
        assert_eq!((e.blocks, e.syscalls), (2, 0));
        assert!(
            e.summary().contains("no instruction of the executable"),
            "{}",
            e.summary()
        );
        // A fault in another shared object (libc) counts too, and syscalls
        // before it are counted.
        let libc = LOG
            .replace("3f7df000-3f7e0000 00001000 r-x", "3f000000-3f100000 00100000 r-x")
            .replace("si_addr=0x3f7f09c4", "si_addr=0x3f000010")
            .replace(
                "IN: \n0x3f7f09c4",
                "1234 mmap2(NULL,4096) = 0x3f000000\nIN: \n0x3f7f09c4",
            );
        let e = check(&sigill(), &libc).unwrap();
        assert_eq!((e.fault_in.as_str(), e.syscalls), ("a shared library", 1));
    }

    #[test]
    fn anything_else_is_not_below_floor() {
        // A block of the executable ran: project code may have run.
        let ran = LOG.replace("0x3f7f09c4:  f81b", "0x40001000:  f81b");
        assert!(check(&sigill(), &ran)
            .unwrap_err()
            .contains("the executable's instruction at 0x40001000"));
        // The fault is in the executable.
        let own = LOG.replace("si_addr=0x3f7f09c4", "si_addr=0x40000010");
        assert!(check(&sigill(), &own)
            .unwrap_err()
            .contains("in the executable's own code"));
        // A static binary enters its own code: not a loader fault.
        let stat = LOG.replace("entry       0x3f7f0760", "entry       0x40000100");
        assert!(check(&sigill(), &stat).unwrap_err().contains("static binary"));
        // No trace, no evidence.
        assert!(check(&sigill(), "").unwrap_err().contains("start_code"));
        let nosig = LOG.replace("--- SIGILL {si_signo=SIGILL, si_code=2, si_addr=0x3f7f09c4} ---", "");
        assert!(check(&sigill(), &nosig).unwrap_err().contains("no SIGILL"));
        // A run that ends any other way.
        let ok = RunOutput {
            code: Some(0),
            ..Default::default()
        };
        assert!(check(&ok, LOG).unwrap_err().contains("expect pass"));
        let refused = RunOutput {
            code: Some(7),
            ..Default::default()
        };
        assert!(check(&refused, LOG).unwrap_err().contains("expect reject"));
        let segv = RunOutput {
            signal: Some(11),
            ..Default::default()
        };
        assert!(check(&segv, LOG).unwrap_err().contains("signal 11"));
    }
}
