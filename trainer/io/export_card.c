// DIR/README.md of an export: what the model is and the three lines that load it.
#include <errno.h>
#include <string.h>
#include <stdio.h>

#include "common/error.h"
#include "trainer/io/export.h"

void export_write_card(const Config *cfg, ExportFormat format, const ExportHead *head, const char *checkpoint,
                       int with_tokenizer, const char *path) {
    const ModelConfig *m = &cfg->model;
    const int bert = m->arch == ARCH_BERT;
    const char *auto_cls = export_auto_class(cfg, head);
    char cls[96];
    snprintf(cls, sizeof cls, "%s%s", export_class_name(cfg, format, head),
             format == EXPORT_MHETRAIN ? " (modeling_mhe.py)" : "");
    static const char *what[] = {NULL, "fine-tuned classifier", "fine-tuned regressor", "fine-tuned span extractor"};
    FILE *f = fopen(path, "w");
    if (!f) mhe_fatal("export: cannot write %s: %s", path, strerror(errno));
    fprintf(f,
            "# %s %s model exported by mhetrain\n\n"
            "- exported from: `%s`\n"
            "- architecture: %s, %s-LN, %d layers, hidden %d, %d heads of size %d, FFN %d, vocabulary %d, "
            "max sequence %d\n"
            "- attention: `%s`%s\n"
            "- transformers class: %s\n"
            "- weights: `model.safetensors`, fp32\n\n"
            "```python\n"
            "from transformers import AutoTokenizer, %s\n"
            "model = %s.from_pretrained(\"path/to/this/dir\"%s).eval()\n",
            arch_name(m->arch), attention_type_name(cfg->attention.type), checkpoint,
            head->kind != EXPORT_HEAD_LM ? what[head->kind] : bert ? "BERT-style masked LM" : "GPT-style causal LM",
            m->norm == NORM_PRE ? "pre" : "post", m->layers,
            m->hidden, m->heads, m->head_dim, m->ffn, m->vocab_size, m->max_seq, attention_type_name(cfg->attention.type),
            format == EXPORT_MHETRAIN ? " (the code is in modeling_mhe.py next to this file)" : "", cls, auto_cls,
            auto_cls, format == EXPORT_MHETRAIN ? ", trust_remote_code=True" : "");
    if (with_tokenizer)
        fprintf(f, "tok = AutoTokenizer.from_pretrained(\"path/to/this/dir\")\n"
                   "out = model(**tok(\"Some text.\", return_tensors=\"pt\"))\n");
    fprintf(f, "```\n");
    static const char *kinds[] = {NULL, "classification", "regression", "span extraction"};
    if (head->kind != EXPORT_HEAD_LM)
        fprintf(f, "\nFine-tuned by `mhetrain finetune` on task format `%s` (%s, %d output%s); `config.json` "
                   "holds `id2label`, `problem_type` and `finetuning_task`.\n",
                cfg->task.format && *cfg->task.format ? cfg->task.format : "unknown", kinds[head->kind],
                head->num_labels, head->num_labels == 1 ? "" : "s");
    if (format == EXPORT_MHETRAIN)
        fprintf(f, "\nThe same directory loads with `AutoModel` (hidden states%s), `%s`, "
                   "`AutoModelForSequenceClassification`, `AutoModelForTokenClassification` and "
                   "`AutoModelForQuestionAnswering` (heads it does not hold are initialised, as transformers does); "
                   "`output_attentions=True` returns every layer's attention probabilities.\n",
                bert ? ", pooler output" : "", bert ? "AutoModelForMaskedLM" : "AutoModelForCausalLM");
    if (fclose(f) != 0) mhe_fatal("export: cannot write %s: %s", path, strerror(errno));
}
