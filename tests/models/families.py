"""Tiny models of each architecture family users run, built from configs (random weights, nothing
downloaded), with what the per-family checks need: inputs, a block to pause in, an op to plant a bug
in, a weight to poison with NaN.

    fam = FAMILIES["llama"]; model, inputs = fam.build(); out = fam.output(model(**inputs))
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import transformers  # noqa: E402

IDS = {"vocab_size": 64, "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0}
DECODER = {"num_hidden_layers": 2, "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
           "num_key_value_heads": 2, "max_position_embeddings": 32, **IDS}


@dataclasses.dataclass(frozen=True)
class Family:
    name: str
    make: Callable[[], tuple[torch.nn.Module, dict[str, Any]]]
    block: str                 # a module to pause in, set, and take gradients of (returns a tensor)
    plant: tuple[Any, ...]     # (op, module[, replacement op]) for the diff's planted bug (default: output * 1.01)
    poison: str                # a Linear/Conv whose weight gets a NaN: the first NaN is its output
    inner: str = "aot_eager"   # the inner compiler of the records/pause/transparency checks
    cache: bool = False        # takes use_cache

    def build(self, use_cache: bool | None = None) -> tuple[torch.nn.Module, dict[str, Any]]:
        torch.manual_seed(0)
        model, inputs = self.make()
        if use_cache is not None:
            inputs = {**inputs, "use_cache": use_cache}
        return model.eval(), inputs


def output(out: Any) -> torch.Tensor:
    """The first tensor a model returns (logits, last_hidden_state)."""
    if isinstance(out, torch.Tensor):
        return out
    return out.logits if getattr(out, "logits", None) is not None else out[0]


def ids(*shape: int) -> torch.Tensor:
    return torch.randint(1, 64, shape, generator=torch.Generator().manual_seed(1))


def pixels(size: int) -> torch.Tensor:
    return torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1))


def _decoder(config: type, model: type, **extra: Any):
    return lambda: (model(config(**DECODER, **extra)), {"input_ids": ids(2, 8)})


def _t5():
    cfg = transformers.T5Config(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
                                relative_attention_num_buckets=8, relative_attention_max_distance=16,
                                decoder_start_token_id=0, **IDS)
    return transformers.T5ForConditionalGeneration(cfg), {"input_ids": ids(2, 8), "decoder_input_ids": ids(2, 8)}


def _bart():
    cfg = transformers.BartConfig(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                                  decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                                  max_position_embeddings=32, decoder_start_token_id=0, **IDS)
    return transformers.BartForConditionalGeneration(cfg), {"input_ids": ids(2, 8), "decoder_input_ids": ids(2, 8)}


def _bert():
    cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                  max_position_embeddings=32, vocab_size=64, pad_token_id=0)
    return transformers.BertModel(cfg, add_pooling_layer=False), {"input_ids": ids(2, 8)}


def _vit():
    cfg = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                 image_size=16, patch_size=4, num_channels=3)
    return transformers.ViTModel(cfg, add_pooling_layer=False), {"pixel_values": pixels(16)}


def _resnet():
    cfg = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic",
                                    num_channels=3)
    return transformers.ResNetModel(cfg), {"pixel_values": pixels(32)}


RMS = "torch.rsqrt"
LN = "torch.nn.functional.layer_norm"
FAMILIES = {f.name: f for f in (
    Family("llama", _decoder(transformers.LlamaConfig, transformers.LlamaForCausalLM), "model.layers.1.mlp",
           (RMS, "model.layers.1.post_attention_layernorm"), "model.layers.1.mlp.down_proj", "inductor", True),
    Family("mistral", _decoder(transformers.MistralConfig, transformers.MistralForCausalLM), "model.layers.1.mlp",
           (RMS, "model.layers.1.input_layernorm"), "model.layers.0.self_attn.o_proj", cache=True),
    Family("qwen2", _decoder(transformers.Qwen2Config, transformers.Qwen2ForCausalLM), "model.layers.0.mlp",
           (RMS, "model.norm"), "model.layers.1.mlp.up_proj", cache=True),
    Family("mixtral", _decoder(transformers.MixtralConfig, transformers.MixtralForCausalLM, num_local_experts=4,
                               num_experts_per_tok=2), "model.layers.1.self_attn",
           (RMS, "model.layers.1.input_layernorm"), "model.layers.0.self_attn.v_proj", "inductor", True),
    Family("bert", _bert, "encoder.layer.1.output", (LN, "encoder.layer.1.attention.output.LayerNorm"),
           "encoder.layer.0.intermediate.dense", "inductor"),
    # T5's own position buckets take log(0) = -inf (then discarded): the poisoned weight comes before
    Family("t5", _t5, "encoder.block.1.layer.1", (RMS, "encoder.block.1.layer.0.layer_norm"),
           "encoder.block.0.layer.0.SelfAttention.q", cache=True),
    # post-LN: the next LayerNorm normalizes a scaled value away; plant a wrong activation instead
    Family("bart", _bart, "model.decoder.layers.1",
           ("torch.nn.functional.gelu", "model.encoder.layers.1.activation_fn", torch.relu),
           "model.decoder.layers.1.fc1", cache=True),
    Family("vit", _vit, "layers.1.mlp", (LN, "layers.1.layernorm_after"), "layers.0.attention.q_proj"),
    Family("resnet", _resnet, "encoder.stages.1", ("torch.nn.functional.batch_norm",
                                                   "encoder.stages.1.layers.0.layer.1.normalization"),
           "encoder.stages.0.layers.0.layer.0.convolution"),
)}
