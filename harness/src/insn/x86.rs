//! x86 and x86-64: the file's code decoded by iced-x86, each instruction's
//! CPUID features named as the guard names them.
//!
//! `disassemble` reads an ELF or PE file with `object` and, like `objdump
//! -d`, decodes every byte of every code section, one symbol's range at a
//! time (restarting at each symbol, and on PE at each `.pdata` function
//! start), each instruction belonging to the last symbol at or before it.
//! `features` maps iced's `CpuidFeature`s: an explicit list is baseline,
//! everything else is a finding, a feature this file does not know by the
//! name `x86:<iced name>`, which no baseline or guard holds (fail closed).

use crate::audit::{Function, Insn};
use anyhow::{bail, Context, Result};
use iced_x86::{Code, CpuidFeature, Decoder, DecoderOptions, Formatter, Instruction, IntelFormatter};
use object::{Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, SectionKind, SymbolKind};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;

/// What bytes that decode to no instruction need: a finding, never baseline
/// (code the audit cannot read is code it cannot vouch for).
pub const UNDECODABLE: &str = "x86:undecodable";

/// The guard's name for what `f` stands for, or `None` when every CPU that
/// can run code of this mode has it. `long_mode`: 64-bit code, where MMX,
/// SSE and SSE2 are part of every CPU; in 32-bit code they are features,
/// since the start-up path of an i686 build must run below Rust's SSE2
/// floor (the Pentium II and III are refused by its pre-main check).
pub fn feature_name(f: CpuidFeature, long_mode: bool) -> Option<Cow<'static, str>> {
    use CpuidFeature as F;
    let name = match f {
        // The 8086..486 ISA, x87, and what every P6-class CPU and every
        // x86-64 CPU has: CPUID, CMPXCHG8B, CMOV/FCMOV/FCOMI, RDTSC,
        // FXSAVE/FXRSTOR.
        F::INTEL8086 | F::INTEL186 | F::INTEL286 | F::INTEL386 | F::INTEL486 => return None,
        F::FPU | F::FPU287 | F::FPU387 => return None,
        F::CPUID | F::CX8 | F::CMOV | F::TSC | F::FXSR => return None,
        // Encoded in the space that CPUs before them execute as NOPs
        // (0F 1F multi-byte NOP since the P6; `rep nop` for PAUSE; ENDBR in
        // the 0F 1E reserved-NOP space).
        F::MULTIBYTENOP | F::PAUSE | F::CET_IBT => return None,
        F::X64 | F::SYSCALL if long_mode => return None,
        F::MMX | F::SSE | F::SSE2 if long_mode => return None,
        // Every x86-64 CPU has CLFLUSH; in 32-bit code it came with SSE2
        // (Pentium 4), and the old tables counted it as SSE2 there.
        F::CLFSH if long_mode => return None,
        F::CLFSH => "sse2",
        F::MMX => "mmx",
        F::SSE => "sse",
        F::SSE2 => "sse2",
        F::SSE3 => "sse3",
        F::SSSE3 => "ssse3",
        F::SSE4_1 => "sse4_1",
        F::SSE4_2 => "sse4_2",
        F::SSE4A => "sse4a",
        F::POPCNT => "popcnt",
        F::LZCNT => "abm",
        F::BMI1 => "bmi1",
        F::BMI2 => "bmi2",
        F::MOVBE => "movbe",
        F::CMPXCHG16B => "cx16",
        F::XSAVE => "xsave",
        F::XSAVEOPT => "xsaveopt",
        F::XSAVEC => "xsavec",
        F::XSAVES => "xsaves",
        F::AVX => "avx",
        F::AVX2 => "avx2",
        F::FMA => "fma",
        F::F16C => "f16c",
        F::AVX_VNNI => "avx_vnni",
        F::AVX512F => "avx512f",
        F::AVX512BW => "avx512bw",
        F::AVX512DQ => "avx512dq",
        F::AVX512VL => "avx512vl",
        F::AVX512CD => "avx512cd",
        F::AVX512_VNNI => "avx512_vnni",
        F::AVX512_IFMA => "avx512ifma",
        F::AVX512_VBMI => "avx512vbmi",
        F::AVX512_VBMI2 => "avx512_vbmi2",
        F::AVX512_BITALG => "avx512_bitalg",
        F::AVX512_VPOPCNTDQ => "avx512_vpopcntdq",
        F::AVX512_BF16 => "avx512_bf16",
        F::AVX512_FP16 => "avx512_fp16",
        F::AES => "aes",
        F::VAES => "vaes",
        F::PCLMULQDQ => "pclmulqdq",
        F::VPCLMULQDQ => "vpclmulqdq",
        F::GFNI => "gfni",
        F::SHA => "sha_ni",
        F::ADX => "adx",
        F::RDRAND => "rdrand",
        F::RDSEED => "rdseed",
        F::RDTSCP => "rdtscp",
        F::RDPID => "rdpid",
        F::MONITOR => "monitor",
        F::PREFETCHW => "3dnowprefetch",
        F::CLFLUSHOPT => "clflushopt",
        F::CLWB => "clwb",
        F::FSGSBASE => "fsgsbase",
        F::CET_SS => "shstk",
        F::RTM => "rtm",
        F::HLE => "hle",
        F::SERIALIZE => "serialize",
        F::WAITPKG => "waitpkg",
        other => return Some(Cow::Owned(format!("x86:{other:?}").to_ascii_lowercase())),
    };
    Some(Cow::Borrowed(name))
}

/// The features one decoded instruction needs (guard names, unsorted).
pub fn features(i: &Instruction, long_mode: bool) -> Vec<Cow<'static, str>> {
    match i.code() {
        Code::INVALID => vec![Cow::Borrowed(UNDECODABLE)],
        // TZCNT is `rep bsf`, which CPUs without BMI1 execute as BSF: the
        // same result for a nonzero input, the only case LLVM emits it for
        // on a baseline target.
        Code::Tzcnt_r16_rm16 | Code::Tzcnt_r32_rm32 | Code::Tzcnt_r64_rm64 => Vec::new(),
        code => code
            .cpuid_features()
            .iter()
            .filter_map(|f| feature_name(*f, long_mode))
            .collect(),
    }
}

/// The features of the one instruction encoded in `hex` (hex pairs, as
/// objdump prints them): bytes that are not exactly one instruction are
/// undecodable.
pub fn classify_hex(hex: &str, long_mode: bool) -> Vec<Cow<'static, str>> {
    let bytes: Option<Vec<u8>> = hex.split_whitespace().map(|h| u8::from_str_radix(h, 16).ok()).collect();
    let Some(bytes) = bytes.filter(|b| !b.is_empty()) else {
        return vec![Cow::Borrowed(UNDECODABLE)];
    };
    let mut d = Decoder::new(if long_mode { 64 } else { 32 }, &bytes, DecoderOptions::NONE);
    let i = d.decode();
    if i.len() != bytes.len() {
        return vec![Cow::Borrowed(UNDECODABLE)];
    }
    features(&i, long_mode)
}

/// A symbol of a code section as the audit names it: demangled like
/// `objdump -C` (Rust names without their hash).
fn display_name(raw: &str) -> String {
    match rustc_demangle::try_demangle(raw) {
        Ok(d) => format!("{d:#}"),
        Err(_) => raw.to_string(),
    }
}

/// How objdump orders symbols at one address (binutils' `compare_symbols`),
/// the first naming the code there: a function before a label, a global
/// before a weak before a local, on ELF the larger size first, a name with
/// a leading `.` last, then by the raw (mangled) name.
type Rank = (bool, bool, bool, std::cmp::Reverse<u64>, bool, String);

/// The symbol chosen for an address, and whether it is data.
type Named = (Rank, bool);

fn rank(s: &object::Symbol<'_, '_>, elf: bool, raw: &str) -> Rank {
    (
        !is_function(s),
        s.is_local(),
        !s.is_global() || s.is_weak(),
        std::cmp::Reverse(if elf { s.size() } else { 0 }),
        raw.starts_with('.'),
        raw.to_string(),
    )
}

/// BFD's function flag: ELF `STT_FUNC` (not `STT_GNU_IFUNC`, whose local
/// `*_ifunc` resolver twin objdump prints instead), a COFF function.
fn is_function(s: &object::Symbol<'_, '_>) -> bool {
    match s.flags() {
        object::SymbolFlags::Elf { st_info, .. } => st_info.st_type() == object::elf::STT_FUNC,
        _ => s.kind() == SymbolKind::Text,
    }
}

/// Whether the symbol table types `s` as data: ELF `STT_OBJECT`; on COFF
/// a symbol or label that is not a function, and the `.ctors`/`.dtors`
/// section symbols mingw-w64's linker script puts in `.text`.
fn is_data(s: &object::Symbol<'_, '_>, raw: &str) -> bool {
    match s.flags() {
        object::SymbolFlags::Elf { st_info, .. } => st_info.st_type() == object::elf::STT_OBJECT,
        _ => match s.kind() {
            SymbolKind::Data | SymbolKind::Label => true,
            SymbolKind::Section => raw.starts_with(".ctors") || raw.starts_with(".dtors"),
            _ => false,
        },
    }
}

/// The PLT stubs of a `.plt*` section, named `symbol@plt` as objdump's
/// synthetic symbols name them: each stub's `jmp [GOT slot]` gives the
/// slot, the dynamic relocation of the slot the symbol. A stub starts at
/// the 16-byte boundary (8 in `.plt.got`) before its jump.
fn plt_entries(
    code: &[u8],
    start: u64,
    align: u64,
    long_mode: bool,
    got: &BTreeMap<u64, String>,
) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    let mut d = Decoder::with_ip(if long_mode { 64 } else { 32 }, code, start, DecoderOptions::NONE);
    for i in d.iter() {
        if i.mnemonic() != iced_x86::Mnemonic::Jmp || i.op0_kind() != iced_x86::OpKind::Memory {
            continue;
        }
        let slot = if i.is_ip_rel_memory_operand() {
            i.ip_rel_memory_address()
        } else if i.memory_base() == iced_x86::Register::None && i.memory_index() == iced_x86::Register::None {
            i.memory_displacement64()
        } else {
            continue;
        };
        if let Some(name) = got.get(&slot) {
            let entry = start + (i.ip() - start) / align * align;
            if !out.iter().any(|(a, _)| *a == entry) {
                out.push((entry, format!("{name}@plt")));
            }
        }
    }
    out
}

/// Decodes the code sections of an x86 ELF or PE file into functions.
pub fn disassemble(path: &Path, long_mode: bool) -> Result<Vec<Function>> {
    let data = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
    let file = object::File::parse(&*data).with_context(|| format!("parse {}", path.display()))?;
    let want = if long_mode {
        object::Architecture::X86_64
    } else {
        object::Architecture::I386
    };
    if file.architecture() != want {
        bail!("{} is {:?}, not {want:?}", path.display(), file.architecture());
    }
    // Function starts without a symbol of their own: restart decoding there.
    let mut pdata_starts = Vec::new();
    if let Some(p) = file.section_by_name(".pdata") {
        let base = file.relative_address_base();
        let d = p.data().context("read .pdata")?;
        for e in d.chunks_exact(12) {
            let begin = u32::from_le_bytes([e[0], e[1], e[2], e[3]]);
            if begin != 0 {
                pdata_starts.push(base + u64::from(begin));
            }
        }
    }
    let elf = file.format() == object::BinaryFormat::Elf;
    // GOT slot → the imported symbol it holds, for the PLT stubs' names.
    let mut got_slots = BTreeMap::new();
    if let (Some(relocs), Some(dynsyms)) = (file.dynamic_relocations(), file.dynamic_symbol_table()) {
        for (slot, r) in relocs {
            let object::RelocationTarget::Symbol(i) = r.target() else {
                continue;
            };
            if let Ok(name) = dynsyms.symbol_by_index(i).and_then(|s| s.name()) {
                if !name.is_empty() {
                    got_slots.insert(slot, name.to_string());
                }
            }
        }
    }
    let mut formatter = IntelFormatter::new();
    let o = formatter.options_mut();
    o.set_hex_prefix("0x");
    o.set_hex_suffix("");
    o.set_uppercase_hex(false);
    o.set_branch_leading_zeros(false);
    o.set_memory_size_options(iced_x86::MemorySizeOptions::Always);
    let mut out = Vec::new();
    for section in file.sections() {
        if section.kind() != SectionKind::Text {
            continue;
        }
        let code = section
            .data()
            .with_context(|| format!("read section {:?}", section.name()))?;
        let start = section.address();
        let end = start + code.len() as u64;
        // address → the symbol that names it
        let mut names: BTreeMap<u64, Named> = BTreeMap::new();
        for s in file.symbols() {
            if s.section_index() != Some(section.index()) || s.kind() == SymbolKind::File {
                continue;
            }
            let Ok(raw) = s.name() else { continue };
            if raw.is_empty() || !(start..end).contains(&s.address()) {
                continue;
            }
            let r = (rank(&s, elf, raw), is_data(&s, raw));
            let e = names.entry(s.address()).or_insert_with(|| r.clone());
            if r.0 < e.0 {
                *e = r;
            }
        }
        let section_name = section.name().unwrap_or("").to_string();
        if section_name.starts_with(".plt") {
            for (at, name) in plt_entries(
                code,
                start,
                if section_name == ".plt.got" { 8 } else { 16 },
                long_mode,
                &got_slots,
            ) {
                names
                    .entry(at)
                    .or_insert(((false, false, false, std::cmp::Reverse(0), false, name), false));
            }
        }
        // Code before the first symbol: objdump names it after the next
        // symbol (`foo@plt-0x10`, PLT0), or by the section when none follows.
        if !names.contains_key(&start) {
            let name = match names.iter().next() {
                Some((at, next)) if section_name.starts_with(".plt") => format!("{}-{:#x}", next.0 .5, at - start),
                _ => section_name.clone(),
            };
            names.insert(start, ((true, true, true, std::cmp::Reverse(0), true, name), false));
        }
        let mut cuts: Vec<u64> = names.keys().copied().collect();
        cuts.extend(pdata_starts.iter().copied().filter(|a| (start..end).contains(a)));
        cuts.sort_unstable();
        cuts.dedup();
        let mut current: Option<Function> = None;
        for (n, &from) in cuts.iter().enumerate() {
            if let Some((r, data)) = names.get(&from) {
                out.extend(current.take());
                current = Some(Function {
                    data: *data,
                    name: display_name(&r.5),
                    insns: Vec::new(),
                });
            }
            let f = current.as_mut().expect("the section start is named");
            let to = cuts.get(n + 1).copied().unwrap_or(end);
            let bytes = &code[(from - start) as usize..];
            let mut d = Decoder::with_ip(if long_mode { 64 } else { 32 }, bytes, from, DecoderOptions::NONE);
            let mut i = Instruction::default();
            while d.can_decode() && d.ip() < to {
                let at = d.position();
                d.decode_out(&mut i);
                let enc = &bytes[at..at + i.len().max(1)];
                let mut text = String::new();
                if i.is_invalid() {
                    text.push_str("(bad)");
                } else {
                    formatter.format(&i, &mut text);
                }
                f.insns.push(Insn {
                    addr: i.ip(),
                    bytes: enc.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" "),
                    text,
                });
            }
        }
        out.extend(current.take());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn x64(hex: &str) -> Vec<String> {
        sorted(classify_hex(hex, true))
    }
    fn x32(hex: &str) -> Vec<String> {
        sorted(classify_hex(hex, false))
    }
    fn sorted(v: Vec<Cow<'static, str>>) -> Vec<String> {
        let mut v: Vec<String> = v.into_iter().map(String::from).collect();
        v.sort();
        v
    }

    #[test]
    fn x86_64_baseline_is_clean() {
        for (hex, what) in [
            ("48 8b 47 08", "mov rax,[rdi+8]"),
            ("66 0f fe c1", "paddd xmm0,xmm1"),
            ("66 0f f5 c1", "pmaddwd xmm0,xmm1"),
            ("0f 28 74 24 10", "movaps xmm6,[rsp+0x10]"),
            ("f3 48 ab", "rep stos"),
            ("f0 48 0f b1 0f", "lock cmpxchg [rdi],rcx"),
            ("0f a2", "cpuid"),
            ("f3 0f 1e fa", "endbr64"),
            ("f3 90", "pause"),
            ("66 0f 1f 04 00", "nop word [rax+rax]"),
            ("0f ae 38", "clflush [rax]"),
            ("0f 05", "syscall"),
            // tzcnt runs as bsf without BMI1, the same for the nonzero
            // inputs LLVM emits it for.
            ("f3 0f bc c1", "tzcnt eax,ecx"),
        ] {
            assert_eq!(x64(hex), Vec::<String>::new(), "{what}");
        }
    }

    #[test]
    fn x86_64_extensions_from_the_encoding() {
        let cases: &[(&str, &[&str])] = &[
            ("66 0f 38 40 c1", &["sse4_1"]),                     // pmulld
            ("66 0f 38 00 c1", &["ssse3"]),                      // pshufb
            ("f3 41 0f 16 c0", &["sse3"]),                       // movshdup
            ("f2 0f 38 f1 c1", &["sse4_2"]),                     // crc32
            ("c5 fe 6f 07", &["avx"]),                           // vmovdqu ymm
            ("c5 fd fe c1", &["avx2"]),                          // vpaddd ymm
            ("c4 e2 7d 18 c1", &["avx2"]),                       // vbroadcastss ymm,xmm
            ("c4 e2 7d 18 07", &["avx"]),                        // vbroadcastss ymm,[mem]
            ("c4 e2 75 b8 c2", &["fma"]),                        // vfmadd231ps ymm
            ("c4 e2 75 50 c2", &["avx_vnni"]),                   // {vex} vpdpbusd ymm
            ("62 f2 75 28 50 c2", &["avx512_vnni", "avx512vl"]), // EVEX vpdpbusd ymm
            ("62 f2 75 48 50 c2", &["avx512_vnni"]),             // vpdpbusd zmm
            ("62 81 3e 08 59 24 96", &["avx512f"]),              // vmulss xmm20 (scalar: no VL)
            ("c4 e1 fb 92 c8", &["avx512bw"]),                   // kmovq k1,rax
            ("0f 01 d0", &["xsave"]),                            // xgetbv
            ("f3 0f bd c1", &["abm"]),                           // lzcnt
            ("f3 0f b8 c1", &["popcnt"]),
            ("48 0f c7 0f", &["cx16"]),       // cmpxchg16b
            ("c7 f8 00 00 00 00", &["rtm"]),  // xbegin
            ("0f 0d 0f", &["3dnowprefetch"]), // prefetchw
            ("c5 f8 77", &["avx"]),           // vzeroupper
        ];
        for (hex, want) in cases {
            assert_eq!(x64(hex), *want, "{hex}");
        }
    }

    #[test]
    fn i686_code_is_asked_for_mmx_sse_and_sse2() {
        for (hex, what) in [
            ("55", "push ebp"),
            ("0f a2", "cpuid"),
            ("0f 45 c2", "cmovne"),
            ("dd 04 24", "fld"),
            ("0f ae 00", "fxsave"),
            ("0f 31", "rdtsc"),
            ("f3 0f 1e fb", "endbr32"),
            ("c5 06", "lds (c5 with a memory ModRM is not VEX in 32-bit code)"),
        ] {
            assert_eq!(x32(hex), Vec::<String>::new(), "{what}");
        }
        let cases: &[(&str, &[&str])] = &[
            ("f3 0f 7e 86 54 1c 00 00", &["sse2"]), // movq xmm0,[esi+0x1c54]
            ("66 0f d6 04 24", &["sse2"]),          // movq [esp],xmm0
            ("0f 57 c0", &["sse"]),                 // xorps
            ("0f c2 d2 03", &["sse"]),              // cmpunordps (the old tables said sse2)
            ("0f ae 14 24", &["sse"]),              // ldmxcsr
            ("0f ae f0", &["sse2"]),                // mfence
            ("0f ae 38", &["sse2"]),                // clflush
            ("0f fc c1", &["mmx"]),                 // paddb mm0,mm1
            ("0f 77", &["mmx"]),                    // emms
            ("66 0f 38 00 c1", &["ssse3"]),         // pshufb (implies sse2)
            ("c5 f1 fe c2", &["avx"]),              // vpaddd xmm
        ];
        for (hex, want) in cases {
            assert_eq!(x32(hex), *want, "{hex}");
        }
    }

    #[test]
    fn what_is_not_one_instruction_is_a_finding() {
        assert_eq!(x64(""), [UNDECODABLE]);
        assert_eq!(x64("ff ff"), [UNDECODABLE]);
        assert_eq!(x64("55 55"), [UNDECODABLE], "two instructions");
        assert_eq!(x64("zz"), [UNDECODABLE]);
    }

    #[test]
    fn unknown_features_fail_closed() {
        assert_eq!(
            feature_name(CpuidFeature::AVX512_4FMAPS, true).as_deref(),
            Some("x86:avx512_4fmaps")
        );
        assert_eq!(feature_name(CpuidFeature::SSE2, false).as_deref(), Some("sse2"));
        assert_eq!(feature_name(CpuidFeature::SSE2, true), None);
        assert_eq!(feature_name(CpuidFeature::X64, true), None);
        assert_eq!(
            feature_name(CpuidFeature::SYSCALL, false).as_deref(),
            Some("x86:syscall")
        );
    }

    /// The reader on a real ELF: this test's own executable.
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    #[test]
    fn reads_an_elf_like_objdump() {
        let exe = std::env::current_exe().unwrap();
        let f = disassemble(&exe, true).unwrap();
        assert!(f.iter().any(|f| f.name == "_start"), "no _start");
        assert!(f.iter().any(|f| f.name == "main"), "no main");
        let me = f
            .iter()
            .find(|f| f.name == "harness::insn::x86::tests::reads_an_elf_like_objdump")
            .expect("this test's function, demangled without its hash");
        assert!(!me.data && me.insns.len() > 5);
        assert!(me.insns.windows(2).all(|w| w[0].addr < w[1].addr));
        assert!(!me.insns[0].bytes.is_empty() && !me.insns[0].text.is_empty());
        assert!(disassemble(&exe, false).is_err(), "a 64-bit file is not i386");
    }
}
