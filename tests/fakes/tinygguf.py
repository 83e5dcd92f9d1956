"""A tiny llama-architecture GGUF written by the test suite itself (no downloads).

About 0.6 MB: a byte-level SentencePiece-style vocabulary (the 256 byte tokens plus a few words)
and random float32 weights, two layers, grouped-query attention. Real llama.cpp loads it and
answers; the text is gibberish, which is all a test of the plumbing needs.

    path = write_tiny_gguf(tmp_path / "tiny.gguf")
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 2
N_LAYER = 2
N_FF = 128
CONTEXT_LENGTH = 4096
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
WORDS = ["▁hello", "▁world", "▁the", "▁a", "▁is", "▁of", "▁and", "▁to", "▁in", "▁it"]


def _vocab() -> tuple[list[bytes], list[float], list[int]]:
    from gguf import TokenType

    tokens: list[bytes] = [b"<unk>", b"<s>", b"</s>", b"<|im_start|>", b"<|im_end|>"]
    types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL, TokenType.CONTROL, TokenType.CONTROL]
    scores = [0.0] * len(tokens)
    for b in range(256):
        tokens.append(f"<0x{b:02X}>".encode())
        types.append(TokenType.BYTE)
        scores.append(0.0)
    for i, word in enumerate(WORDS):
        tokens.append(word.encode())
        types.append(TokenType.NORMAL)
        scores.append(-float(i))
    return tokens, scores, [int(t) for t in types]


def write_tiny_gguf(
    path: str | os.PathLike[str],
    *,
    seed: int = 0,
    context_length: int = CONTEXT_LENGTH,
    n_embd: int = N_EMBD,
    n_layer: int = N_LAYER,
    n_ff: int = N_FF,
) -> Path:
    """Write the model to `path` (idempotent: same seed and sizes, same bytes) and return the path.
    Larger sizes make prefill cost real time (`bench/affinity_bench.py`); the heads stay 4 and 2."""
    import gguf

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tokens, scores, types = _vocab()
    n_vocab = len(tokens)
    head_dim = n_embd // N_HEAD
    rng = np.random.default_rng(seed)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # concurrent writers never share a temp file
    writer = gguf.GGUFWriter(str(tmp), "llama")
    writer.add_name("tiny-test-llama")
    writer.add_context_length(context_length)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(4)  # <|im_end|> ends a chat turn
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML)

    # numpy shapes are ggml's ne reversed: a weight mapping n_in -> n_out is (n_out, n_in).
    writer.add_tensor("token_embd.weight", w(n_vocab, n_embd))
    writer.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    writer.add_tensor("output.weight", w(n_vocab, n_embd))
    for i in range(n_layer):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.attn_q.weight", w(n_embd, n_embd))
        writer.add_tensor(f"blk.{i}.attn_k.weight", w(N_HEAD_KV * head_dim, n_embd))
        writer.add_tensor(f"blk.{i}.attn_v.weight", w(N_HEAD_KV * head_dim, n_embd))
        writer.add_tensor(f"blk.{i}.attn_output.weight", w(n_embd, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", w(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", w(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", w(n_embd, n_ff))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, path)
    return path


if __name__ == "__main__":
    import sys

    print(write_tiny_gguf(sys.argv[1] if len(sys.argv) > 1 else "tiny.gguf"))
