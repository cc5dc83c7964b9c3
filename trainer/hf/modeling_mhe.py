# Hugging Face models for mhetrain checkpoints: BERT-style MLM (MheForMaskedLM) and GPT-style
# CLM (MheForCausalLM) with any of mhetrain's attention types (DESIGN.md §1).  Parameter names
# are mhetrain's canonical names (trainer/model/params.c), so an exported model.safetensors is the
# checkpoint's own tensors.  `mhetrain export` copies this file and configuration_mhe.py next to
# config.json; load with AutoModelFor{MaskedLM,CausalLM}.from_pretrained(dir, trust_remote_code=True).
#
# Every head is materialised (Q_i, K_i, V_i per head) and attention is computed literally: this
# file favours obviously-correct over fast; the C trainer holds the fast paths.  The per-head
# Q_i, K_i, V_i of each type are its module in attention/ (one file per variant).
import importlib
import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput, MaskedLMOutput

from .configuration_mhe import MheConfig

# `mhetrain export` ships the model's attention variant (trainer/hf/attention/<type>.py) as
# mhe_attention.py; this static relative import is what makes transformers copy it along.
try:
    from .mhe_attention import NAME as _SHIPPED_NAME  # noqa: F401

    _shipped = importlib.import_module(f"{__package__}.mhe_attention")
except ImportError:
    _shipped = None


def _variant(name):
    """The module of attention type `name`: in an exported folder, the one shipped next to this
    file as mhe_attention.py; in the mhetrain sources, trainer/hf/attention/<name>.py."""
    if _shipped is not None and _shipped.NAME == name:
        return _shipped
    try:
        return importlib.import_module(f"{__package__}.attention.{name}" if __package__ else f"attention.{name}")
    except ImportError:
        raise ValueError(f"unknown attention type {name!r} (no module for it next to modeling_mhe.py)") from None


def variant_options(config, variant):
    """The variant's own keys from the config (config.json names may differ: HF_KEYS)."""
    raw = {k: getattr(config, variant.HF_KEYS.get(k, k), v) for k, v in variant.OPTIONS.items()}
    return variant.resolve(raw, config.hidden_size, config.num_attention_heads, config.head_dim)


class MheAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        D, n, d = config.hidden_size, config.num_attention_heads, config.head_dim
        self.kind = config.attention_type
        self.heads, self.head_dim = n, d
        self.variant = _variant(self.kind)
        self.options = variant_options(config, self.variant)
        self.drop = nn.Dropout(config.attention_probs_dropout_prob)
        self.variant.build(self, D, n, d, self.options)
        self.o = nn.Linear(n * d, D)

    def forward(self, x, allowed):
        """x [B, T, D]; allowed [B, 1, T, T] bool (query r may attend key j)."""
        B, T, _ = x.shape
        scale = 1.0 / math.sqrt(self.head_dim)
        q, k, v, key_bias = self.variant.per_head(self, x, self.heads, self.head_dim, self.options)
        scores = torch.matmul(q, k.transpose(-1, -2)) * scale
        if key_bias is not None:
            scores = scores + key_bias
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
        probs = self.drop(torch.softmax(scores, dim=-1))
        heads = torch.matmul(probs, v.expand(B, self.heads, T, -1) if v.shape[1] == 1 else v)
        return self.o(heads.transpose(1, 2).reshape(B, T, -1))


class MheFeedForward(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.up = nn.Linear(config.hidden_size, config.intermediate_size)
        self.down = nn.Linear(config.intermediate_size, config.hidden_size)
        self.approximate = "tanh" if config.hidden_act == "gelu_new" else "none"

    def forward(self, x):
        return self.down(F.gelu(self.up(x), approximate=self.approximate))


class MheLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.pre_norm = config.norm_placement == "pre"
        self.attn = MheAttention(config)
        self.ln1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.ffn = MheFeedForward(config)
        self.ln2 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.drop = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x, allowed):
        if self.pre_norm:
            h = x + self.drop(self.attn(self.ln1(x), allowed))
            return h + self.drop(self.ffn(self.ln2(h)))
        h = self.ln1(x + self.drop(self.attn(x, allowed)))
        return self.ln2(h + self.drop(self.ffn(h)))


class MheEmbeddings(nn.Module):
    # Raw parameters rather than nn.Embedding so the names stay "embed.word", "embed.pos", ...
    def __init__(self, config):
        super().__init__()
        D = config.hidden_size
        self.word = nn.Parameter(torch.zeros(config.vocab_size, D))
        self.pos = nn.Parameter(torch.zeros(config.max_position_embeddings, D))
        self.is_bert = config.arch == "bert"
        if self.is_bert:
            # nn.Module has a method named `type`, so register_parameter refuses the name: put
            # the parameter in _parameters directly (state_dict and loading only look there).
            self._parameters["type"] = nn.Parameter(torch.zeros(config.type_vocab_size, D))
            self.ln = nn.LayerNorm(D, eps=config.layer_norm_eps)
        self.drop = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids, position_ids):
        x = F.embedding(input_ids, self.word) + F.embedding(position_ids, self.pos)
        if self.is_bert:
            x = self.ln(x + F.embedding(token_type_ids, self._parameters["type"]))
        return self.drop(x)


class MheMlmHead(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.ln = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.approximate = "tanh" if config.hidden_act == "gelu_new" else "none"

    def forward(self, h, word):
        return F.linear(self.ln(F.gelu(self.dense(h), approximate=self.approximate)), word, self.bias)


class MhePreTrainedModel(PreTrainedModel):
    config_class = MheConfig
    base_model_prefix = "mhe"  # no submodule of that name: checkpoints hold the full model
    _no_split_modules = ["MheLayer"]

    def _init_weights(self, module):
        std = getattr(self.config, "initializer_range", 0.02)
        if isinstance(module, nn.Linear):
            module.weight.data.normal_(0.0, std)
            module.bias.data.zero_()
        elif isinstance(module, nn.LayerNorm):
            module.weight.data.fill_(1.0)
            module.bias.data.zero_()
        elif isinstance(module, MheEmbeddings):
            for p in module.parameters(recurse=False):
                p.data.normal_(0.0, std)
        elif isinstance(module, MheAttention):
            module.variant.init_weights(module, std)
        elif isinstance(module, MheMlmHead):
            module.bias.data.zero_()


class _MheTransformer(MhePreTrainedModel):
    causal = False

    def __init__(self, config):
        super().__init__(config)
        want = "gpt" if self.causal else "bert"
        if config.arch != want:
            raise ValueError(f"{type(self).__name__} needs arch {want!r}, the config says {config.arch!r}")
        self.embed = MheEmbeddings(config)
        self.layers = nn.ModuleList(MheLayer(config) for _ in range(config.num_hidden_layers))
        if config.norm_placement == "pre":
            self.final_ln = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        if config.arch == "bert":
            self.head = MheMlmHead(config)
        self.post_init()

    def _logits(self, input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states):
        B, T = input_ids.shape
        dev = input_ids.device
        if position_ids is None:
            position_ids = torch.arange(T, device=dev).unsqueeze(0).expand(B, T)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        allowed = attention_mask.bool()[:, None, None, :].expand(B, 1, T, T)
        if self.causal:
            allowed = allowed & torch.ones(T, T, dtype=torch.bool, device=dev).tril()
        h = self.embed(input_ids, token_type_ids, position_ids)
        hidden = [h]
        for layer in self.layers:
            h = layer(h, allowed)
            hidden.append(h)
        if hasattr(self, "final_ln"):
            h = self.final_ln(h)
        logits = self.head(h, self.embed.word) if hasattr(self, "head") else F.linear(h, self.embed.word)
        return logits, (tuple(hidden) if output_hidden_states else None)


class MheForMaskedLM(_MheTransformer):
    causal = False

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                labels=None, output_hidden_states=None, return_dict=None, **unused):
        logits, hidden = self._logits(input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=-100)
        if return_dict is False:
            return tuple(x for x in (loss, logits, hidden) if x is not None)
        return MaskedLMOutput(loss=loss, logits=logits, hidden_states=hidden)


class MheForCausalLM(_MheTransformer):
    causal = True

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                labels=None, output_hidden_states=None, return_dict=None, **unused):
        logits, hidden = self._logits(input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states)
        loss = None
        if labels is not None:  # as GPT2LMHeadModel: position t predicts labels[t+1]
            shift = logits[:, :-1].reshape(-1, logits.shape[-1])
            loss = F.cross_entropy(shift, labels[:, 1:].reshape(-1), ignore_index=-100)
        if return_dict is False:
            return tuple(x for x in (loss, logits, hidden) if x is not None)
        return CausalLMOutput(loss=loss, logits=logits, hidden_states=hidden)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        # No key/value cache: every step reruns the whole prefix (positions stay 0 … T-1).
        return {"input_ids": input_ids, "attention_mask": attention_mask}
