# Hugging Face configuration for mhetrain models whose attention has no stock transformers class
# (every type but `mha`, or a non-standard norm placement / head size).  `mhetrain export`
# copies this file next to config.json; load with trust_remote_code=True.  The attention type's
# own keys (kv_groups, collab_dim, latent_dim, ...) are kept as given (PretrainedConfig stores
# extra keyword arguments) and resolved and checked by the type's module (attention/<type>.py)
# when the model is built.
from transformers import PretrainedConfig


class MheConfig(PretrainedConfig):
    model_type = "mhetrain"

    def __init__(
        self,
        arch="bert",
        vocab_size=30522,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        head_dim=None,
        intermediate_size=None,
        max_position_embeddings=512,
        type_vocab_size=2,
        norm_placement=None,
        hidden_act=None,
        layer_norm_eps=None,
        attention_type="mha",
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
        classifier_dropout=None,
        **kwargs,
    ):
        if arch not in ("bert", "gpt"):
            raise ValueError(f"MheConfig: arch must be 'bert' or 'gpt', got {arch!r}")
        is_bert = arch == "bert"
        self.arch = arch
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.head_dim = head_dim or hidden_size // num_attention_heads
        self.intermediate_size = intermediate_size or 4 * hidden_size
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size if is_bert else 0
        self.norm_placement = norm_placement or ("post" if is_bert else "pre")
        # "gelu" is the erf form, "gelu_new" the tanh approximation (transformers' names).
        self.hidden_act = hidden_act or ("gelu" if is_bert else "gelu_new")
        self.layer_norm_eps = layer_norm_eps if layer_norm_eps is not None else (1e-12 if is_bert else 1e-5)
        self.attention_type = attention_type
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        # Dropout before a classification head; None: hidden_dropout_prob (as BERT).
        self.classifier_dropout = classifier_dropout
        if self.norm_placement not in ("post", "pre"):
            raise ValueError(f"MheConfig: norm_placement must be 'post' or 'pre', got {self.norm_placement!r}")
        if self.hidden_act not in ("gelu", "gelu_new"):
            raise ValueError(f"MheConfig: hidden_act must be 'gelu' or 'gelu_new', got {self.hidden_act!r}")
        kwargs.setdefault("tie_word_embeddings", True)
        super().__init__(**kwargs)
