"""Build a tiny, real Llama model on local disk, for the demo and the engine tests.

Nothing can be downloaded from a model hub on CI machines, so the model is made here: a
``LlamaForCausalLM`` with random weights (hidden size 128, 2 layers, 2 heads, vocabulary
2048) and a byte-level BPE tokenizer trained with ``tokenizers`` on text that every Debian
machine has (``/usr/share/common-licenses``), about 2 MB in all and 10 s to build. The
engine serves it like any Hugging Face checkpoint; its output is gibberish, which is all a
test of serving, warmup, fallback and draining needs.

Needs ``torch``, ``transformers`` and ``tokenizers`` (the CPU engine's environment); they are
imported when the function runs, not at import time, so runtime images never need them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

#: The model's shape: small enough to load in a second, big enough to exercise every layer kind.
VOCAB_SIZE = 2048
HIDDEN_SIZE = 128
LAYERS = 2
HEADS = 2
INTERMEDIATE_SIZE = 256
MAX_POSITIONS = 2048

#: A chat template inline in tokenizer_config.json, so older and newer transformers both read it.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}</s>\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"]
MARKER = "ascend-llm-tiny-model.json"


def _training_text() -> list[str]:
    """Local text to train the tokenizer on; falls back to generated text if none exists."""

    texts: list[str] = []
    root = Path("/usr/share/common-licenses")
    if root.is_dir():
        for path in sorted(root.iterdir()):
            if path.is_file():
                texts.append(path.read_text(encoding="utf-8", errors="replace"))
    if not texts:  # a minimal container: synthesise a corpus with enough distinct words
        words = [f"w{i}x{i * 7 % 13}" for i in range(5000)]
        texts = [" ".join(words[i : i + 50]) for i in range(0, len(words), 50)]
    return texts


def build_tiny_model(directory: str | Path, seed: int = 0) -> Path:
    """Write the model to ``directory`` (created) and return it. Reuses a complete earlier build."""

    directory = Path(directory)
    marker = directory / MARKER
    if marker.is_file() and json.loads(marker.read_text()).get("seed") == seed:
        return directory
    directory.mkdir(parents=True, exist_ok=True)

    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_training_text(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(directory))
    # Keep the template inline and the class name portable across transformers versions.
    config_path = directory / "tokenizer_config.json"
    tok_config = json.loads(config_path.read_text())
    tok_config["chat_template"] = CHAT_TEMPLATE
    tok_config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(tok_config, indent=2))
    (directory / "chat_template.jinja").unlink(missing_ok=True)

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=HIDDEN_SIZE,
        intermediate_size=INTERMEDIATE_SIZE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=tokenizer.token_to_id("<s>"),
        eos_token_id=tokenizer.token_to_id("</s>"),
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(str(directory), safe_serialization=True)
    marker.write_text(json.dumps({"seed": seed, "vocab_size": VOCAB_SIZE}))
    return directory


#: The tiny model's attention projections a tiny adapter targets (the ``LlamaAttention`` names).
LORA_TARGETS = ("q_proj", "v_proj")


def build_tiny_lora(directory: str | Path, rank: int = 8, seed: int = 1, scale: float = 0.5) -> Path:
    """Write a PEFT-format LoRA adapter for the tiny model to ``directory`` (created) and return it.

    ``adapter_config.json`` plus ``adapter_model.safetensors`` with random ``lora_A`` / ``lora_B``
    (both non-zero, so the adapter changes the model's output) for :data:`LORA_TARGETS` of every
    layer, as vLLM's LoRA loader reads them. Needs ``torch`` and ``safetensors``.
    """

    import torch
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(seed)
    out_features = {"q_proj": HIDDEN_SIZE, "v_proj": HIDDEN_SIZE}  # heads == kv heads here
    tensors = {}
    for layer in range(LAYERS):
        for target in LORA_TARGETS:
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{target}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(rank, HIDDEN_SIZE, generator=generator) * scale
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(out_features[target], rank, generator=generator) * scale
    weights = directory / "adapter_model.safetensors"
    save_file(tensors, str(weights))
    # safetensors writes the file owner-only (0600); an engine in a pod runs as another user.
    umask = os.umask(0)
    os.umask(umask)
    weights.chmod(0o666 & ~umask)
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": rank,
        "lora_alpha": 2 * rank,
        "lora_dropout": 0.0,
        "target_modules": list(LORA_TARGETS),
        "bias": "none",
        "modules_to_save": None,
        "fan_in_fan_out": False,
        "use_rslora": False,
        "use_dora": False,
        "init_lora_weights": True,
    }
    (directory / "adapter_config.json").write_text(json.dumps(config, indent=2))
    return directory
