"""Write a tiny llama-architecture GGUF with random weights: ``python make_gguf.py OUT.gguf``.

Run with the live llama venv's Python (it has the ``gguf`` package and numpy; runner's own venv
need not). 64 hidden x 2 layers over a vocabulary of every byte plus the printable ASCII
characters, so any text tokenizes and a JSON grammar can always be satisfied: the replies are
gibberish, the protocol is real. The weights come from a fixed seed, so the file is the same on
every run.
"""

from __future__ import annotations

import sys

import gguf
import numpy as np

HIDDEN, LAYERS, HEADS, FF, CONTEXT = 64, 2, 4, 128, 2048


def vocabulary() -> tuple[list[bytes], list[float], list[int]]:
    """(tokens, scores, types) of a SentencePiece-style vocabulary with byte fallback."""
    tokens = [b"<unk>", b"<s>", b"</s>"]
    types = [
        gguf.TokenType.UNKNOWN,
        gguf.TokenType.CONTROL,
        gguf.TokenType.CONTROL,
    ]
    for byte in range(256):
        tokens.append(f"<0x{byte:02X}>".encode())
        types.append(gguf.TokenType.BYTE)
    # SentencePiece writes a space as U+2581; printable characters are ordinary pieces.
    for char in ["\u2581", *(chr(c) for c in range(33, 127))]:
        tokens.append(char.encode())
        types.append(gguf.TokenType.NORMAL)
    scores = [0.0] * 3 + [-1000.0] * 256 + [-1.0] * (len(tokens) - 259)
    return tokens, scores, [int(t) for t in types]


def write(path: str) -> None:
    rng = np.random.default_rng(29)
    tokens, scores, types = vocabulary()
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("runner-live-tiny")
    w.add_context_length(CONTEXT)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(HEADS)
    w.add_rope_dimension_count(HIDDEN // HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    def tensor(name: str, *shape: int, scale: float = 0.2) -> None:
        w.add_tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    def ones(name: str) -> None:
        w.add_tensor(name, np.ones(HIDDEN, dtype=np.float32))

    vocab = len(tokens)
    tensor("token_embd.weight", vocab, HIDDEN)
    ones("output_norm.weight")
    tensor("output.weight", vocab, HIDDEN, scale=1.0)  # wide logits: varied gibberish
    for i in range(LAYERS):
        ones(f"blk.{i}.attn_norm.weight")
        ones(f"blk.{i}.ffn_norm.weight")
        for part in ("q", "k", "v", "output"):
            tensor(f"blk.{i}.attn_{part}.weight", HIDDEN, HIDDEN)
        tensor(f"blk.{i}.ffn_gate.weight", FF, HIDDEN)
        tensor(f"blk.{i}.ffn_up.weight", FF, HIDDEN)
        tensor(f"blk.{i}.ffn_down.weight", HIDDEN, FF)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    write(sys.argv[1])
