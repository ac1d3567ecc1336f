"""GGUF files (llama.cpp, Ollama) as models: real files written with ``gguf.GGUFWriter``.

Q8_0 tensors are quantized by the gguf package itself; its writer has no Q4_K/Q6_K
quantizer, so those tensors hold zero blocks of the type's exact byte size
(``quant_shape_to_byte_shape``): the header and tensor table are what is read.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import roofprof
from roofprof.errors import ConfigError, UnknownNameError
from roofprof.specs import load_model

gguf = pytest.importorskip("gguf")
Q = gguf.GGMLQuantizationType

H, FF, LAYERS, VOCAB = 256, 512, 2, 1024
#: GGUF tensor -> (rows, columns) in PyTorch order (out, in), type.
LAYER = {
    "attn_q": ((H, H), Q.Q4_K),
    "attn_k": ((128, H), Q.Q4_K),
    "attn_v": ((128, H), Q.Q6_K),
    "attn_output": ((H, H), Q.Q4_K),
    "ffn_gate": ((FF, H), Q.Q4_K),
    "ffn_up": ((FF, H), Q.Q4_K),
    "ffn_down": ((H, FF), Q.Q6_K),
}


def _tensor(shape, qtype):
    if qtype == Q.F32:
        return np.ones(shape, np.float32)
    if qtype == Q.F16:
        return np.zeros(shape, np.float16)
    if qtype == Q.Q8_0:
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        return gguf.quants.quantize(x, qtype)
    return np.zeros(gguf.quants.quant_shape_to_byte_shape(shape, qtype), np.uint8)


def write_gguf(path: Path, arch: str = "llama", tied: bool = False) -> Path:
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("tiny-q4km")
    w.add_block_count(LAYERS)
    w.add_context_length(4096)
    w.add_embedding_length(H)
    w.add_feed_forward_length(FF)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(VOCAB)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    tensors = {"token_embd.weight": ((VOCAB, H), Q.Q8_0), "output_norm.weight": ((H,), Q.F32)}
    if not tied:
        tensors["output.weight"] = ((VOCAB, H), Q.F16)
    for i in range(LAYERS):
        tensors[f"blk.{i}.attn_norm.weight"] = ((H,), Q.F32)
        tensors[f"blk.{i}.ffn_norm.weight"] = ((H,), Q.F32)
        for name, spec in LAYER.items():
            tensors[f"blk.{i}.{name}.weight"] = spec
    for name, (shape, qtype) in tensors.items():
        data = _tensor(shape, qtype)
        w.add_tensor(name, data, raw_dtype=None if qtype in (Q.F32, Q.F16) else qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def model_file(tmp_path_factory) -> Path:
    return write_gguf(tmp_path_factory.mktemp("gguf") / "tiny-Q4_K_M.gguf")


def test_sizes_come_from_the_header(model_file):
    m = load_model(str(model_file))
    assert (m.hidden_size, m.intermediate_size, m.num_layers) == (H, FF, LAYERS)
    assert (m.num_heads, m.num_kv_heads, m.head_dim, m.vocab_size) == (4, 2, 64, VOCAB)
    assert (m.max_position_embeddings, m.rope_theta, m.family) == (4096, 500000.0, "llama")
    assert not m.tie_word_embeddings and m.source == f"GGUF file {model_file}"


def test_bits_per_weight_are_each_tensor_types(model_file):
    stored = load_model(str(model_file)).stored
    # llama.cpp's block sizes: Q4_K 144 B / 256, Q6_K 210 B / 256, Q8_0 34 B / 32
    assert stored.bits("q_proj") == stored.bits("gate_proj") == 144 * 8 / 256
    assert stored.bits("v_proj") == stored.bits("down_proj") == 210 * 8 / 256
    assert stored.bits("embedding") == 34 * 8 / 32 and stored.bits("lm_head") == 16.0
    assert stored.format == "gguf-Q4_K_M" and stored.source == "GGUF tensor table (Q4_K_M)"
    reader = gguf.GGUFReader(str(model_file))
    assert stored.total_bytes == sum(int(t.n_bytes) for t in reader.tensors)


def test_decode_reads_the_files_bytes(model_file):
    p = roofprof.predict(str(model_file), gpu="h100-sxm", prompt_tokens=16, dtype="fp16")
    ops = {o.op.name: o.op for o in p.decode.ops}
    reader = {t.name: int(t.n_bytes) for t in gguf.GGUFReader(str(model_file)).tensors}
    assert ops["q_proj"].weight_bytes == reader["blk.0.attn_q.weight"]
    assert ops["down_proj"].weight_bytes == reader["blk.0.ffn_down.weight"]
    assert ops["lm_head"].weight_bytes == reader["output.weight"]
    assert p.to_dict()["weights"] == "gguf-Q4_K_M"


def test_tied_output_reads_the_embedding_table(tmp_path):
    m = load_model(str(write_gguf(tmp_path / "tied.gguf", tied=True)))
    assert m.tie_word_embeddings and m.stored.bits("lm_head") == 34 * 8 / 32


def test_an_unread_architecture_is_refused_by_name(tmp_path):
    with pytest.raises(UnknownNameError, match="'falcon'.*llama"):
        load_model(str(write_gguf(tmp_path / "f.gguf", arch="falcon")))


def test_a_file_that_is_not_gguf_is_one_line(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(ConfigError, match="not a readable GGUF file"):
        load_model(str(bad))


def test_missing_gguf_package_names_the_extra(model_file, tmp_path):
    # a fresh interpreter where `import gguf` fails: the CLI's one line and exit code 2
    (tmp_path / "gguf.py").write_text("raise ImportError('no gguf here')\n")
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from roofprof.cli import console_main; "
        "sys.argv = ['roofprof', 'predict', '--model', sys.argv[2], '--gpu', 'h100-sxm']; "
        "console_main()"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path), str(model_file)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1].endswith("pip install 'roofprof[gguf]'")
    assert "Traceback" not in out.stderr
