# Hugging Face models for mhetrain checkpoints with any of mhetrain's attention types
# (DESIGN.md §1): the encoder/decoder MheModel (AutoModel) and its heads — MheForMaskedLM (bert),
# MheForCausalLM (gpt, cache-less generate), MheForSequenceClassification,
# MheForTokenClassification, MheForQuestionAnswering.  `mhetrain export` copies this file and
# configuration_mhe.py next to config.json; load with AutoModel…from_pretrained(dir,
# trust_remote_code=True).
#
# Layout as transformers' own models: the heads hold the transformer as `self.mhe`
# (base_model_prefix), so an MLM export loads into every head class (new heads initialised, with
# transformers' usual warning) and a fine-tuned export loads into AutoModel.  Tensor names are
# mhetrain's canonical names (trainer/model/params.c) under `mhe.`, with `.weight` after the
# three embeddings (nn.Embedding, so resize_token_embeddings and tying work); the MLM head is
# `head.*` and the task heads are named as BERT's / GPT-2's (`mhe.pooler.dense`, `classifier`,
# `score`, `qa_outputs`).  trainer/io/export_hf.c writes exactly these names.
#
# Every head is materialised (Q_i, K_i, V_i per head) and attention is computed literally: this
# file favours obviously-correct over fast; the C trainer holds the fast paths.  Because the
# per-head probabilities always exist here, output_attentions=True returns them for every type.
# The per-head Q_i, K_i, V_i of each type are its module in attention/ (one file per variant).
import importlib
import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import (
    BaseModelOutputWithPooling,
    CausalLMOutput,
    MaskedLMOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)

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


def _gelu(config):
    return "tanh" if config.hidden_act == "gelu_new" else "none"


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

    def forward(self, x, allowed, head_mask=None):
        """x [B, T, D]; allowed [B, 1, T, T] bool (query r may attend key j).  Returns the output
        [B, T, D] and the attention probabilities [B, n, T, T] (after dropout, as BERT returns
        them; every row sums to 1 in eval mode)."""
        B, T, _ = x.shape
        scale = 1.0 / math.sqrt(self.head_dim)
        q, k, v, key_bias = self.variant.per_head(self, x, self.heads, self.head_dim, self.options)
        scores = torch.matmul(q, k.transpose(-1, -2)) * scale
        if key_bias is not None:
            scores = scores + key_bias
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
        probs = self.drop(torch.softmax(scores, dim=-1))
        if head_mask is not None:
            probs = probs * head_mask
        heads = torch.matmul(probs, v.expand(B, self.heads, T, -1) if v.shape[1] == 1 else v)
        return self.o(heads.transpose(1, 2).reshape(B, T, -1)), probs


class MheFeedForward(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.up = nn.Linear(config.hidden_size, config.intermediate_size)
        self.down = nn.Linear(config.intermediate_size, config.hidden_size)
        self.approximate = _gelu(config)

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

    def forward(self, x, allowed, head_mask=None):
        if self.pre_norm:
            a, probs = self.attn(self.ln1(x), allowed, head_mask)
            h = x + self.drop(a)
            return h + self.drop(self.ffn(self.ln2(h))), probs
        a, probs = self.attn(x, allowed, head_mask)
        h = self.ln1(x + self.drop(a))
        return self.ln2(h + self.drop(self.ffn(h))), probs


class MheEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        D = config.hidden_size
        self.word = nn.Embedding(config.vocab_size, D)
        self.pos = nn.Embedding(config.max_position_embeddings, D)
        self.is_bert = config.arch == "bert"
        if self.is_bert:
            self.token_type = nn.Embedding(config.type_vocab_size, D)
            self.ln = nn.LayerNorm(D, eps=config.layer_norm_eps)
        self.drop = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids, position_ids, inputs_embeds=None):
        x = self.word(input_ids) if inputs_embeds is None else inputs_embeds
        x = x + self.pos(position_ids)
        if self.is_bert:
            x = self.ln(x + self.token_type(token_type_ids))
        return self.drop(x)


class MhePooler(nn.Module):
    """BERT's pooler: dense + tanh on the first token ([CLS])."""

    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, h):
        return torch.tanh(self.dense(h[:, 0]))


class MheMlmHead(nn.Module):
    """dense + GELU + LayerNorm, then the decoder tied to the word embeddings, whose bias is
    `bias` (the same Parameter: written once, as `head.bias`)."""

    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.ln = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.decoder.bias = self.bias
        self.approximate = _gelu(config)

    def _tie_weights(self):  # called by PreTrainedModel.tie_weights, e.g. after a resize
        self.decoder.bias = self.bias

    def forward(self, h):
        return self.decoder(self.ln(F.gelu(self.dense(h), approximate=self.approximate)))


class MhePreTrainedModel(PreTrainedModel):
    config_class = MheConfig
    base_model_prefix = "mhe"
    _no_split_modules = ["MheLayer"]
    supports_gradient_checkpointing = True  # per layer: MheModel.forward

    def _init_weights(self, module):
        std = getattr(self.config, "initializer_range", 0.02)
        if isinstance(module, nn.Linear):
            module.weight.data.normal_(0.0, std)
            if module.bias is not None:
                module.bias.data.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.data.normal_(0.0, std)
        elif isinstance(module, nn.LayerNorm):
            module.weight.data.fill_(1.0)
            module.bias.data.zero_()
        elif isinstance(module, MheAttention):
            module.variant.init_weights(module, std)
        elif isinstance(module, MheMlmHead):
            module.bias.data.zero_()

    def _check_arch(self, want):
        if want is not None and self.config.arch != want:
            raise ValueError(f"{type(self).__name__} needs arch {want!r}, the config says {self.config.arch!r}")

    def _return(self, return_dict, cls, **fields):
        if return_dict is None:
            return_dict = self.config.use_return_dict
        if return_dict:
            return cls(**fields)
        return tuple(v for v in fields.values() if v is not None)


class MheModel(MhePreTrainedModel):
    """The transformer without a head (AutoModel): last_hidden_state (after the final LayerNorm
    when pre-LN), pooler_output (bert, when add_pooling_layer), hidden_states (the embeddings
    and every layer's output; with a final LayerNorm the last entry is last_hidden_state, as
    GPT-2 does), attentions (every layer's probabilities [B, n, T, T])."""

    def __init__(self, config, add_pooling_layer=True):
        super().__init__(config)
        self.embed = MheEmbeddings(config)
        self.layers = nn.ModuleList(MheLayer(config) for _ in range(config.num_hidden_layers))
        if config.norm_placement == "pre":
            self.final_ln = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.pooler = MhePooler(config) if add_pooling_layer and config.arch == "bert" else None
        self.gradient_checkpointing = False  # gradient_checkpointing_enable() sets it
        self.post_init()

    def get_input_embeddings(self):
        return self.embed.word

    def set_input_embeddings(self, value):
        self.embed.word = value

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                head_mask=None, inputs_embeds=None, output_attentions=None, output_hidden_states=None,
                return_dict=None, **unused):
        cfg = self.config
        output_attentions = cfg.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = cfg.output_hidden_states if output_hidden_states is None else output_hidden_states
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("MheModel: pass exactly one of input_ids and inputs_embeds")
        B, T = input_ids.shape if input_ids is not None else inputs_embeds.shape[:2]
        dev = input_ids.device if input_ids is not None else inputs_embeds.device
        if T > cfg.max_position_embeddings:
            raise ValueError(f"MheModel: sequence length {T} > max_position_embeddings {cfg.max_position_embeddings}")
        if position_ids is None:
            position_ids = torch.arange(T, device=dev).unsqueeze(0).expand(B, T)
        if token_type_ids is None:
            token_type_ids = torch.zeros(B, T, dtype=torch.long, device=dev)
        if attention_mask is None:
            attention_mask = torch.ones(B, T, dtype=torch.long, device=dev)
        allowed = attention_mask.bool()[:, None, None, :].expand(B, 1, T, T)
        if cfg.arch == "gpt":
            allowed = allowed & torch.ones(T, T, dtype=torch.bool, device=dev).tril()
        head_mask = self.get_head_mask(head_mask, cfg.num_hidden_layers)
        h = self.embed(input_ids, token_type_ids, position_ids, inputs_embeds)
        hidden, attentions = [h], []
        for layer, hm in zip(self.layers, head_mask):
            if self.gradient_checkpointing and self.training:  # recompute the layer in backward
                h, probs = self._gradient_checkpointing_func(layer.__call__, h, allowed, hm)
            else:
                h, probs = layer(h, allowed, hm)
            hidden.append(h)
            attentions.append(probs)
        if getattr(self, "final_ln", None) is not None:
            h = self.final_ln(h)
            hidden[-1] = h
        pooled = self.pooler(h) if self.pooler is not None else None
        return self._return(return_dict, BaseModelOutputWithPooling, last_hidden_state=h, pooler_output=pooled,
                            hidden_states=tuple(hidden) if output_hidden_states else None,
                            attentions=tuple(attentions) if output_attentions else None)


def _body(model, input_ids, attention_mask, token_type_ids, position_ids, head_mask, inputs_embeds,
          output_attentions, output_hidden_states):
    return model.mhe(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                     position_ids=position_ids, head_mask=head_mask, inputs_embeds=inputs_embeds,
                     output_attentions=output_attentions, output_hidden_states=output_hidden_states,
                     return_dict=True)


class MheForMaskedLM(MhePreTrainedModel):
    _tied_weights_keys = ["head.decoder.weight", "head.decoder.bias"]

    def __init__(self, config):
        super().__init__(config)
        self._check_arch("bert")
        self.mhe = MheModel(config, add_pooling_layer=False)
        self.head = MheMlmHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.head.decoder

    def set_output_embeddings(self, new):
        self.head.decoder = new
        self.head.bias = new.bias

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None, head_mask=None,
                inputs_embeds=None, labels=None, output_attentions=None, output_hidden_states=None,
                return_dict=None, **unused):
        out = _body(self, input_ids, attention_mask, token_type_ids, position_ids, head_mask, inputs_embeds,
                    output_attentions, output_hidden_states)
        logits = self.head(out.last_hidden_state)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=-100)
        return self._return(return_dict, MaskedLMOutput, loss=loss, logits=logits, hidden_states=out.hidden_states,
                            attentions=out.attentions)


class MheForCausalLM(MhePreTrainedModel):
    _tied_weights_keys = ["lm_head.weight"]

    def __init__(self, config):
        super().__init__(config)
        self._check_arch("gpt")
        self.mhe = MheModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, new):
        self.lm_head = new

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None, head_mask=None,
                inputs_embeds=None, labels=None, output_attentions=None, output_hidden_states=None,
                return_dict=None, **unused):
        out = _body(self, input_ids, attention_mask, token_type_ids, position_ids, head_mask, inputs_embeds,
                    output_attentions, output_hidden_states)
        logits = self.lm_head(out.last_hidden_state)
        loss = None
        if labels is not None:  # as GPT2LMHeadModel: position t predicts labels[t+1]
            shift = logits[:, :-1].reshape(-1, logits.shape[-1])
            loss = F.cross_entropy(shift, labels[:, 1:].reshape(-1), ignore_index=-100)
        return self._return(return_dict, CausalLMOutput, loss=loss, logits=logits, hidden_states=out.hidden_states,
                            attentions=out.attentions)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        # No key/value cache: every step reruns the whole prefix (positions stay 0 … T-1).
        return {"input_ids": input_ids, "attention_mask": attention_mask}


def _classifier_dropout(config):
    p = getattr(config, "classifier_dropout", None)
    return nn.Dropout(config.hidden_dropout_prob if p is None else p)


def _sequence_loss(config, num_labels, logits, labels):
    """transformers' rule: problem_type from the config, else regression for one label,
    single-label for integer labels, multi-label otherwise."""
    if config.problem_type is None:
        if num_labels == 1:
            config.problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int):
            config.problem_type = "single_label_classification"
        else:
            config.problem_type = "multi_label_classification"
    if config.problem_type == "regression":
        if num_labels == 1:
            return F.mse_loss(logits.squeeze(), labels.squeeze().to(logits.dtype))
        return F.mse_loss(logits, labels.to(logits.dtype))
    if config.problem_type == "single_label_classification":
        return F.cross_entropy(logits.view(-1, num_labels), labels.view(-1))
    return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))


class MheForSequenceClassification(MhePreTrainedModel):
    """bert: pooler ([CLS], dense + tanh), dropout, `classifier` (BertForSequenceClassification).
    gpt: `score` (no bias) on the final hidden state of the last real token
    (GPT2ForSequenceClassification).  The last real token is the last position whose
    attention_mask is 1 (right or left padding); without a mask, as GPT-2: the token before the
    first pad_token_id, else the last position (batches of one only when no pad_token_id)."""

    def __init__(self, config):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.is_bert = config.arch == "bert"
        self.mhe = MheModel(config)
        if self.is_bert:
            self.dropout = _classifier_dropout(config)
            self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        else:
            self.score = nn.Linear(config.hidden_size, config.num_labels, bias=False)
        self.post_init()

    def _last_token(self, input_ids, attention_mask, B, T, dev):
        if attention_mask is not None:
            pos = torch.arange(T, device=dev).expand(B, T)
            return torch.where(attention_mask.bool(), pos, torch.full_like(pos, -1)).max(dim=1).values.clamp(min=0)
        pad = self.config.pad_token_id
        if pad is None or input_ids is None:
            if B != 1:
                raise ValueError("MheForSequenceClassification (gpt): batches of more than one sequence need an "
                                 "attention_mask or config.pad_token_id to find each row's last token")
            return torch.full((B,), T - 1, device=dev, dtype=torch.long)
        return (torch.eq(input_ids, pad).int().argmax(-1) - 1) % T

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None, head_mask=None,
                inputs_embeds=None, labels=None, output_attentions=None, output_hidden_states=None,
                return_dict=None, **unused):
        out = _body(self, input_ids, attention_mask, token_type_ids, position_ids, head_mask, inputs_embeds,
                    output_attentions, output_hidden_states)
        h = out.last_hidden_state
        if self.is_bert:
            logits = self.classifier(self.dropout(out.pooler_output))
        else:
            B, T = h.shape[:2]
            last = self._last_token(input_ids, attention_mask, B, T, h.device)
            logits = self.score(h)[torch.arange(B, device=h.device), last]
        loss = _sequence_loss(self.config, self.num_labels, logits, labels) if labels is not None else None
        return self._return(return_dict, SequenceClassifierOutput, loss=loss, logits=logits,
                            hidden_states=out.hidden_states, attentions=out.attentions)


class MheForTokenClassification(MhePreTrainedModel):
    """dropout + `classifier` on every token (BertForTokenClassification /
    GPT2ForTokenClassification); cross-entropy over labels != -100."""

    def __init__(self, config):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.mhe = MheModel(config, add_pooling_layer=False)
        self.dropout = _classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None, head_mask=None,
                inputs_embeds=None, labels=None, output_attentions=None, output_hidden_states=None,
                return_dict=None, **unused):
        out = _body(self, input_ids, attention_mask, token_type_ids, position_ids, head_mask, inputs_embeds,
                    output_attentions, output_hidden_states)
        logits = self.classifier(self.dropout(out.last_hidden_state))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, self.num_labels), labels.view(-1), ignore_index=-100)
        return self._return(return_dict, TokenClassifierOutput, loss=loss, logits=logits,
                            hidden_states=out.hidden_states, attentions=out.attentions)


class MheForQuestionAnswering(MhePreTrainedModel):
    """`qa_outputs` (D → 2) on every token: start and end logits; the loss is transformers'
    (mean of the start and end cross-entropies, positions clamped to T and ignored there)."""

    def __init__(self, config):
        super().__init__(config)
        self.num_labels = 2
        self.mhe = MheModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None, head_mask=None,
                inputs_embeds=None, start_positions=None, end_positions=None, output_attentions=None,
                output_hidden_states=None, return_dict=None, **unused):
        out = _body(self, input_ids, attention_mask, token_type_ids, position_ids, head_mask, inputs_embeds,
                    output_attentions, output_hidden_states)
        start, end = self.qa_outputs(out.last_hidden_state).split(1, dim=-1)
        start, end = start.squeeze(-1).contiguous(), end.squeeze(-1).contiguous()
        loss = None
        if start_positions is not None and end_positions is not None:
            T = start.shape[1]
            sp = start_positions.view(-1).clamp(0, T)
            ep = end_positions.view(-1).clamp(0, T)
            loss = (F.cross_entropy(start, sp, ignore_index=T) + F.cross_entropy(end, ep, ignore_index=T)) / 2
        return self._return(return_dict, QuestionAnsweringModelOutput, loss=loss, start_logits=start,
                            end_logits=end, hidden_states=out.hidden_states, attentions=out.attentions)


# The classes each arch offers, by Auto class (export_hf.c writes the same table into auto_map).
AUTO_CLASSES = {
    "AutoModel": "MheModel",
    "AutoModelForMaskedLM": "MheForMaskedLM",
    "AutoModelForCausalLM": "MheForCausalLM",
    "AutoModelForSequenceClassification": "MheForSequenceClassification",
    "AutoModelForTokenClassification": "MheForTokenClassification",
    "AutoModelForQuestionAnswering": "MheForQuestionAnswering",
}
