"""Make a tiny random-weight Llama and a locally trained tokenizer, offline.

    python scripts/make_tiny_llama.py OUT_DIR [--layers 2] [--hidden 128] [--vocab 512]

The model `transformers serve` serves in roofprof's endpoint tests and benchmark
(tests/test_endpoint_real.py, benchmarks/bench_endpoint.py): 5 s to make, 5 s to serve.

Writes a Hugging Face model directory (config.json, generation_config.json,
model.safetensors, tokenizer.json, tokenizer_config.json with a chat template)
that `transformers serve OUT_DIR` (and AutoModelForCausalLM / AutoTokenizer)
load with HF_HUB_OFFLINE=1. Nothing is downloaded: the tokenizer is a byte-level
BPE trained here on a seeded synthetic corpus, so every byte string round-trips
and the same inputs give the same vocabulary on any machine.

The vocabulary holds only printable-ASCII (and newline) byte-level BPE tokens
plus <unk>, <s>, </s>, so each generated token decodes to text on its own.
generation_config.json suppresses (logit -inf) the special tokens, EOS included,
so under transformers serve generation always runs to max_tokens (the OpenAI API
has no standard ignore_eos, and transformers serve answers an unknown field such
as ignore_eos with HTTP 422) and every token is one non-empty text delta. vLLM
ignores suppress_tokens; send "ignore_eos": true there (a special token it
samples then streams as an empty-text chunk).

Defaults: 2 layers, hidden 128, 2 heads of 64 (1 KV head), vocab 512: ~0.43 M
parameters. head_dim 64 because vLLM's CPU attention refuses head_dim 16.
"""

import argparse
import json
import random
from pathlib import Path

WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his "
    "from at which but have an they you were her she there been one all we their "
    "has would when if so no will more about can out time up into its only other "
    "some could these two may first then do any like my now over such our man me "
    "even most made after also did many before must through back years where much "
    "your way well down should because each just those people how too little state "
    "good very make world still own see men work long get here between both life "
    "being under never day same another know while last might us great old year "
    "off come since against go came right used take three roofline memory bandwidth "
    "token prefill decode cache kernel matrix vector layer model weight compute"
).split()

SPECIALS = ["<unk>", "<s>", "</s>"]  # ids 0, 1, 2
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def corpus(n_lines: int = 4000, seed: int = 0):
    rng = random.Random(seed)
    for _ in range(n_lines):
        k = rng.randint(5, 25)
        words = [rng.choice(WORDS) for _ in range(k)]
        num = str(rng.randint(0, 99999))
        yield " ".join(words[: k // 2] + [num] + words[k // 2 :]) + "."


def _bytes_to_unicode():
    """GPT-2's reversible byte -> printable-unicode map (what ByteLevel uses)."""
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs), strict=False))


def make_tokenizer(vocab: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    # Byte-level BPE over printable ASCII and newline only: every token decodes
    # to ASCII text on its own, so a server streams one text delta per token
    # (a byte token that ends mid-UTF-8 character streams nothing). Other
    # bytes encode to <unk>.
    b2u = _bytes_to_unicode()
    alphabet = [b2u[b] for b in [10, *range(32, 127)]]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=SPECIALS,
        initial_alphabet=alphabet,
        limit_alphabet=len(alphabet),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    # Prepend BOS like Llama does; the server's prompt_tokens then count it.
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        model_max_length=1_000_000,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--kv-heads", type=int, default=1)
    ap.add_argument("--intermediate", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--max-pos", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tok = make_tokenizer(args.vocab)
    vocab = len(tok)  # BPE may stop short of the requested size
    torch.manual_seed(args.seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        max_position_embeddings=args.max_pos,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg).to(torch.float32).eval()
    printable = set(map(chr, range(32, 127)))
    suppress = [
        i
        for i in range(vocab)
        if i in tok.all_special_ids or not (s := tok.decode([i])) or not set(s) <= printable
    ]
    model.generation_config = GenerationConfig(
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        do_sample=False,
        suppress_tokens=suppress,
    )
    model.save_pretrained(out)
    tok.save_pretrained(out)
    n = sum(p.numel() for p in model.parameters())
    print(
        json.dumps(
            {
                "out": str(out),
                "vocab": vocab,
                "params": n,
                "layers": args.layers,
                "suppressed_tokens": len(suppress),
            }
        )
    )


if __name__ == "__main__":
    main()
