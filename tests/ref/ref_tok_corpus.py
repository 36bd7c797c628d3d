"""A deterministic multilingual test corpus for the tokenizer tests (>= 10,000 lines).

Lines mix English with contractions, accented Latin, Greek, Cyrillic, Arabic, Hebrew, Indic,
Thai, CJK, Korean, emoji (ZWJ sequences, skin tones, flags), numbers in many forms, whitespace
runs (tabs, runs of spaces, NBSP, ideographic space, CR), combining marks, punctuation runs,
source code, and random assigned code points from several blocks.

Also writes the container the C tests read (see write_cases):
  b"DTTOKREF" u32 count, then per case: u32 flags, u32 text bytes, text, u32 n, n x u32 ids.
"""
import random
import struct
import unicodedata

WORDS = ("the quick brown fox jumps over lazy dog data train model batch epoch loss gradient "
         "tokenizer shard loader prefetch checkpoint resume rank world seed shuffle packing "
         "Hello World OpenAI Llama PyTorch SQLite HTTP JSON UTF-8 I'm you're we've they'll "
         "she'd it's don't can't won't O'Neil's rock'n'roll I'LL YOU'RE WE'VE SHE'D IT'S "
         "a an of to in is was for on are as with his they at be this from have or by one had "
         "not but what all were when we there can your which their said if do will each about "
         "how up out them then many some so these would other into has more her two like him "
         "see time could no make than first been its who now people my made over did down only "
         "way find use may water long little very after words called just where most know").split()

LATIN = ("café naïve résumé Ångström façade Ærøskøbing straße Øresund mañana piñata coöperate "
         "Zürich zażółć gęślą jaźń příliš žluťoučký kůň úpěl ďábelské ódy Tiếng Việt có dấu "
         "İstanbul ığdır şehir garçon élève crème brûlée Ñandú Þingvellir Œuvre ĳssel Ƀ ǅ "
         "Dvořák Łódź Kraków Smörgåsbord fjörð Ísland Ελλάδα").split()

SCRIPTS = [
    "Καλημέρα κόσμε, τι κάνεις; Ἀθῆναι",
    "Съешь же ещё этих мягких французских булок, да выпей чаю",
    "Привет, мир! Ёжик в тумане. Україна, Беларусь",
    "مرحبا بالعالم، كيف حالك؟ ١٢٣٤٥",
    "שלום עולם, מה שלומך?",
    "नमस्ते दुनिया, आप कैसे हैं? १२३",
    "বাংলা ভাষা সুন্দর",
    "வணக்கம் உலகம்",
    "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่าง",
    "你好，世界。今天天气很好，我们去公园散步吧！",
    "中文分词是一个很难的问题；机器学习模型需要大量数据。",
    "こんにちは世界、カタカナとひらがなと漢字。東京タワー",
    "안녕하세요 세계, 한국어 텍스트입니다.",
    "ሰላም ልዑል",
    "Բարեւ աշխարհ",
    "გამარჯობა მსოფლიო",
    "ꯃꯤꯇꯩ ꯃꯌꯦꯛ",
    "Ｆｕｌｌｗｉｄｔｈ　ｔｅｘｔ　１２３",
    "ｶﾀｶﾅ ﾊﾝｶｸ",
]

EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "🇺🇸🇫🇷", "❤️", "🤖", "🎉🎉🎉", "✨", "🙏🏿",
         "🧑‍💻", "👩🏻‍🔬", "🐍", "🦀", "☕", "⚡️", "🔥🔥", "💯", "🥲", "©️", "™", "↔️", "🫠"]

PUNCT = ["!!!", "...", "—", "–", "«»", "¿?", "¡!", "--->", "=====", "***", "???", "…", "§", "¶",
         "()", "[]", "{}", "<>", "@#$%^&*", "~~", "``", "''", '""', "„“", "‹›", "·", "•", "†",
         "/\\", "|", "&&", "||", "::", ";;", "'", "'s", "'S", "'ll", "'Ve"]

SPACES = [" ", "  ", "   ", "\t", "\t\t", " \t ", "\u00a0", "\u3000", "\u2003", "\u2009", "\r",
          "      ", "\u200b", "\u00a0\u00a0", " \r "]

CODE = [
    "def forward(self, x):\n        return self.linear(x) + 1",
    "for (int i = 0; i < n; i++) { sum += a[i] * b[i]; }",
    "if (x != NULL && x->next) return -EINVAL;",
    '{"prompt": "What is 2+2?", "response": "4", "ids": [1, 2, 3]}',
    "<div class=\"main\"><p>Hello&nbsp;world</p></div>",
    "SELECT name, COUNT(*) FROM runs WHERE loss < 0.5 GROUP BY name;",
    "const f = async (a, b) => { await g(a ?? b); };",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); }",
    "    x = torch.randn(4, 3, 32, 32)  # NCHW",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
    "$ ./dtrain data import fashion-mnist /usr/share/datasets -o data/fmnist",
    "a_b_c = x**2 + y**-1; z //= 3; w <<= 2",
    "https://example.com/path?q=1&r=two#frag",
    "C:\\Users\\name\\file.txt",
    "\tindented\twith\ttabs",
    "    return {'a': 1, \"b\": [1.5e-3, -2, 0x1f]}",
]


def _number(r):
    k = r.randrange(12)
    if k == 0:
        return str(r.randrange(10 ** r.randrange(1, 15)))
    if k == 1:
        return f"{r.uniform(-1000, 1000):.{r.randrange(1, 7)}f}"
    if k == 2:
        return f"{r.randrange(10**9):,}"
    if k == 3:
        return f"{r.randrange(1900, 2100)}-{r.randrange(1, 13):02d}-{r.randrange(1, 29):02d}"
    if k == 4:
        return f"{r.random():.3e}"
    if k == 5:
        return hex(r.randrange(1 << 32))
    if k == 6:
        return "+1 (555) " + str(r.randrange(100, 999)) + "-" + str(r.randrange(1000, 9999))
    if k == 7:
        return r.choice(["½", "¾", "x²", "10³", "①②③", "Ⅻ", "١٢٣", "１２３", "۴۵۶", "๑๒๓"])
    if k == 8:
        return "".join(r.choice("0123456789") for _ in range(r.randrange(1, 30)))
    if k == 9:
        return f"{r.randrange(100)}%"
    if k == 10:
        return f"${r.randrange(10000)}.{r.randrange(100):02d}"
    return f"v{r.randrange(10)}.{r.randrange(30)}.{r.randrange(100)}"


BLOCKS = [(0x00A1, 0x024F), (0x0370, 0x03FF), (0x0400, 0x04FF), (0x0590, 0x06FF), (0x0900, 0x097F),
          (0x0E00, 0x0E7F), (0x1E00, 0x1EFF), (0x2000, 0x206F), (0x20A0, 0x20CF), (0x2190, 0x23FF),
          (0x2500, 0x27BF), (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xFF00, 0xFFEF),
          (0x1F300, 0x1F64F), (0x1F900, 0x1F9FF), (0x0300, 0x036F)]


def _random_chars(r):
    lo, hi = r.choice(BLOCKS)
    out = []
    while len(out) < r.randrange(1, 12):
        c = chr(r.randrange(lo, hi + 1))
        cat = unicodedata.category(c)
        # Skip unassigned, private-use and surrogate code points (their classes differ across
        # Unicode versions) and line/paragraph separators (they would end a "line").
        if cat in ("Cn", "Co", "Cs", "Zl", "Zp"):
            continue
        out.append(c)
    return "".join(out)


def _fragment(r):
    k = r.randrange(100)
    if k < 30:
        return " ".join(r.choice(WORDS) for _ in range(r.randrange(1, 8)))
    if k < 40:
        return r.choice(LATIN)
    if k < 52:
        s = r.choice(SCRIPTS)
        if r.random() < 0.5:
            i, j = sorted(r.sample(range(len(s) + 1), 2))
            s = s[i:j] or s
        return s
    if k < 60:
        return "".join(r.choice(EMOJI) for _ in range(r.randrange(1, 4)))
    if k < 70:
        return _number(r)
    if k < 76:
        return r.choice(PUNCT)
    if k < 82:
        return r.choice(CODE).replace("\n", " ")
    if k < 86:
        return r.choice(["e\u0301", "a\u0308", "n\u0303o", "A\u030a", "o\u0302\u0323"]) + r.choice(WORDS)
    if k < 93:
        return _random_chars(r)
    return r.choice(WORDS).upper() + r.choice(["'S", "'s", "'T", "'re", "'LL", "'d", "'M"])


def make_lines(n=12000, seed=1234):
    r = random.Random(seed)
    lines = []
    for i in range(n):
        parts = [_fragment(r) for _ in range(r.randrange(1, 10))]
        line = ""
        for p in parts:
            line += p + (r.choice(SPACES) if r.random() < 0.3 else " ")
        if r.random() < 0.15:
            line = r.choice(SPACES) + line  # leading whitespace
        if r.random() < 0.5:
            line = line.rstrip(" ")
        if i % 97 == 0:
            line = " " * r.randrange(1, 40)  # whitespace-only line
        if i % 101 == 0:
            line = ""
        lines.append(line)
    return lines


def make_blocks(lines, size=25, seed=99):
    """Multi-line texts (newline runs, CRLF, trailing whitespace before newlines)."""
    r = random.Random(seed)
    blocks = []
    for i in range(0, len(lines), size):
        text = ""
        for ln in lines[i:i + size]:
            text += ln + r.choice(["\n", "\n", "\n", "\n\n", "\r\n", "  \n", "\n\n\n", "\t\n"])
        blocks.append(text)
    return blocks


def code_lines():
    return [c for c in CODE]


def long_lines(seed=5):
    """Long pre-tokenizer pieces (thousands of bytes in one regex match) for the O(n log n) merge."""
    r = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return ["a" * 3000, "ab" * 1500, "".join(r.choice(letters) for _ in range(4000)),
            " " * 2000 + "x", "=" * 3000, "1" * 1000, "\n" * 500,
            "".join(chr(r.randrange(0x4E00, 0x9FA5)) for _ in range(1500)),
            "".join(r.choice(EMOJI) for _ in range(400)), "hello" + " " * 500 + "world",
            "".join(r.choice(letters + "éüßøñ") for _ in range(2500)),
            "".join(r.choice("!#$%&()*+,-./:;<=>?@[]^_{|}~") for _ in range(3000))]


def write_cases(path, cases):
    """cases: list of (flags, text, ids)."""
    with open(path, "wb") as f:
        f.write(b"DTTOKREF")
        f.write(struct.pack("<I", len(cases)))
        for flags, text, ids in cases:
            b = text.encode("utf-8")
            f.write(struct.pack("<II", flags, len(b)))
            f.write(b)
            f.write(struct.pack("<I", len(ids)))
            f.write(struct.pack(f"<{len(ids)}I", *ids))
