"""The runtime's byte-level BPE (runtime/src/model/bpe/) against HF
`tokenizers`, and `ml chat` on SmolLM2-135M-Instruct (network:
ML_NETWORK_TESTS=1; tools/fetch_models makes models/).

Parity: `ml tokenize -z models/smollm2-135m.tok TEXT` must print exactly the
ids of the HF ByteLevel BPE built from the same vocabulary and merges
(tokfile.hf_tokenizer: Digits(individual_digits) then the GPT-2 regex,
special tokens as added tokens) on varied strings, and on every Unicode
scalar value in a few contexts (which pins the regex's \\s, \\p{L} and
\\p{N} classes, approximated in Rust by std's char methods plus a table).

Chat, greedy (measured; see also test_smollm2.py's near tie):
  Q8_0, no system message    "The capital of France is Paris."
  Q8_0, the template's default system message ("You are a helpful AI
        assistant named SmolLM, trained by Hugging Face")
                             "L'Étoile, la Cité, …": the first answer token
        is a near tie (f32 'The' 25.33 vs 'L' 25.24) that the runtime's Q8_0
        activation quantization flips; xfail, like test_q8_0_answers_paris.
  Q4_0, default system       "The capital of France is Paris, …"
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO, TOOLS
from tokfile import hf_tokenizer, read_tok

pytestmark = pytest.mark.network

QUESTION = "What is the capital of France?"

# At least 50 strings, by kind.
STRINGS = [
    # punctuation
    "Hello, world!", "Wait... what?!", "--- *** ### !!!", "(a) [b] {c} <d>", "\"quoted\" and 'single'",
    "a/b\\c|d~e^f", "end.", "«guillemets» — em dash – en dash …",
    # digits
    "12345 67.89 1e10", "3.14159265358979323846", "The year 2024 had 366 days.", "+1 (555) 010-9999",
    "0x7FFF_FFFF 0b1010", "123456789012345678901234567890", "١٢٣ ٤٥٦ (Arabic-Indic) ५६७ (Devanagari)", "½ ¾ ² ³ Ⅻ",
    # whitespace runs
    "a  b   c    d", "  leading spaces", "trailing spaces   ", "tabs\tand\nnewlines\n\n", "\t\tindented\n\t\t\tmore",
    "line1\r\nline2\r\n", "x \t y \n z", " ", "\n\n\n", "mixed \u00a0nbsp\u3000ideographic space",
    # contractions
    "don't won't it's we'll they're I'd you've I'm", "IT'S THE DOG'S BONE 'S", "rock'n'roll 'tis ''s '''", "we'Re I'M",
    # non-ASCII
    "naïve café résumé", "Ünïcödé ß ẞ Æsir Øre", "e\u0301 a\u0308 combining marks", "日本語のテキスト、中文，한국어",
    "Привет, как дела? Ёжик", "مرحبا بالعالم، كَتَبَ", "עברית שלום", "हिन्दी भाषा, नमस्ते, क्षत्रिय",
    "தமிழ் ಕನ್ನಡ ไทยภาษา", "Ελληνικά ΑΒΓ", "Ⓐ ⓑ circled, ﬁ ligature",
    # emoji
    "emoji 🎉🚀 ok", "👨\u200d👩\u200d👧\u200d👦 family", "flags 🇫🇷🇯🇵🇺🇸", "👍🏽 ❤️ ☺︎", "🏳️\u200d🌈 rainbow flag",
    # code
    "x=1; y=[2,3]; print(x+y)", "def f(x):\n    return x**2  # square\n", "fn main() { println!(\"{}\", 1 + 2); }",
    "<div class=\"a\">&amp;</div>", "SELECT * FROM t WHERE id = 42;", "$ ls -la | grep '^d'",
    # special tokens inline
    "<|im_start|>user\nhi<|im_end|>", "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more", "<|im_end|><|im_end|>", "<|im_start|", "<repo_name>x<file_sep><filename>y",
    # misc
    "The quick brown fox jumps over the lazy dog.", "",
]


@pytest.fixture(scope="module")
def models():
    subprocess.run([sys.executable, str(TOOLS / "fetch_models"), "--only", "smollm2"], check=True)
    return REPO / "models"


@pytest.fixture(scope="module")
def tok_path(models):
    return models / "smollm2-135m.tok"


@pytest.fixture(scope="module")
def hf(tok_path):
    return hf_tokenizer(read_tok(tok_path.read_bytes()))


def ml_ids(ml_bin, tok_path, text: str) -> list[int]:
    out = subprocess.run([str(ml_bin), "tokenize", "-z", str(tok_path), "--", text],
                         capture_output=True, check=True).stdout
    return [int(x) for x in out.split()]


def test_at_least_50_varied_strings():
    assert len(STRINGS) >= 50 and len(set(STRINGS)) == len(STRINGS)


@pytest.mark.parametrize("text", STRINGS)
def test_ml_tokenize_matches_hf(ml_bin, tok_path, hf, text):
    want = hf.encode(text).ids
    assert ml_ids(ml_bin, tok_path, text) == want, f"{text!r}: HF tokens {hf.encode(text).tokens}"
    assert hf.decode(want, skip_special_tokens=False) == text


def test_every_code_point_in_context(ml_bin, tok_path, hf):
    """Each scalar value c (not NUL, no surrogates) as "a{c} {c}!{c}\\t": the
    ids change if the runtime puts c in another regex class than HF does.
    Chunks stay under Linux's 128 KiB limit on one argument."""
    cps = [c for c in range(1, 0x110000) if not 0xD800 <= c <= 0xDFFF]
    step = 6000
    bad = []
    for i in range(0, len(cps), step):
        chunk = cps[i:i + step]
        text = "".join(f"a{chr(c)} {chr(c)}!{chr(c)}\t" for c in chunk)
        if ml_ids(ml_bin, tok_path, text) == hf.encode(text).ids:
            continue
        for c in chunk:  # find the culprits
            t = f"a{chr(c)} {chr(c)}!{chr(c)}\t"
            if ml_ids(ml_bin, tok_path, t) != hf.encode(t).ids:
                bad.append(f"U+{c:04X}")
                if len(bad) >= 20:
                    break
        if len(bad) >= 20:
            break
    assert not bad, f"code points tokenized unlike HF: {bad}"


def chat(ml_bin, models, wtype, stdin, *args):
    return subprocess.run([str(ml_bin), "chat", str(models / f"smollm2-135m-{wtype}.mlb"), "-z",
                           str(models / "smollm2-135m.tok"), "--temp", "0", *map(str, args)],
                          input=stdin, capture_output=True, text=True)


@pytest.mark.parametrize("wtype,args", [("q8_0", ["--system", ""]), ("q4_0", [])],
                         ids=["q8_0-no-system", "q4_0-default-system"])
def test_chat_answers_paris(ml_bin, models, wtype, args):
    r = chat(ml_bin, models, wtype, QUESTION + "\n", "-n", "40", *args)
    assert r.returncode == 0, r.stderr
    print(f"\n{wtype} {args}: {r.stdout!r}")
    assert "Paris" in r.stdout


@pytest.mark.xfail(reason="near tie at the first answer token (f32: 'The' 25.33 vs 'L' 25.24); the runtime's Q8_0 "
                          "activation quantization flips it (see test_smollm2.py)", strict=False)
def test_chat_q8_0_with_the_default_system_message_answers_paris(ml_bin, models):
    r = chat(ml_bin, models, "q8_0", QUESTION + "\n", "-n", "40")
    assert r.returncode == 0, r.stderr
    print(f"\nq8_0 default system: {r.stdout!r}")
    assert "Paris" in r.stdout


def test_multi_turn_reuses_the_kv_cache_exactly(ml_bin, models, hf):
    """Turn 2 of a chat (fed only its new tokens) gives the same greedy reply
    as `ml run` on the whole conversation's ids from position 0."""
    r = chat(ml_bin, models, "q8_0", f"{QUESTION}\nAnd what is the capital of Germany?\n", "-n", "30", "--system", "")
    assert r.returncode == 0, r.stderr
    replies = r.stdout.splitlines()
    assert len(replies) == 2 and "Paris" in replies[0], r.stdout
    history = (f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n{replies[0]}<|im_end|>\n"
               "<|im_start|>user\nAnd what is the capital of Germany?<|im_end|>\n<|im_start|>assistant\n")
    ids = hf.encode(history).ids
    out = subprocess.run([str(ml_bin), "run", str(models / "smollm2-135m-q8_0.mlb"), "--tokens", ",".join(map(str, ids)),
                          "-n", "30", "--temp", "0"], capture_output=True, text=True, check=True).stdout.split()
    gen = [int(x) for x in out]
    if 2 in gen:
        gen = gen[:gen.index(2)]
    assert hf.decode(gen) == replies[1]
    print(f"\nturn 2: {replies[1]!r}")


def test_a_full_context_is_reported_clearly(ml_bin, models):
    questions = "".join(f"{q}\n" for q in [QUESTION, "And what is the capital of Germany?", "What is 2+2?",
                                           "Name three colors.", "Thank you!"])
    r = chat(ml_bin, models, "q8_0", questions, "-n", "40", "--system", "", "--ctx", "64")
    assert r.returncode == 5, r.stderr  # Shape
    assert "error: context full: " in r.stderr and " of 64 positions used" in r.stderr, r.stderr
    assert "start a new chat" in r.stderr and "panicked" not in r.stderr
    assert len(r.stdout.splitlines()) >= 2 and "Paris" in r.stdout, r.stdout
    print(f"\n{r.stdout!r}\n{r.stderr.strip()}")
