// Export (DESIGN.md §5): a checkpoint to a directory that Hugging Face `transformers` loads with
// from_pretrained: model.safetensors (fp32) + config.json + tokenizer files.
//   bert + mha (post-LN, d = D/n)  -> BertForMaskedLM names and config
//   gpt  + mha (pre-LN,  d = D/n)  -> GPT2LMHeadModel names (Conv1D weights [in, out], fused c_attn)
//   anything else                  -> canonical names under `mhe.`, model_type "mhetrain", auto_map
//                                     to configuration_mhe.py / modeling_mhe.py copied from trainer/hf/
// A fine-tuned checkpoint (task.* head) exports as the matching …ForSequenceClassification /
// …ForQuestionAnswering instead of the LM class.
#ifndef MHE_TRAINER_EXPORT_H
#define MHE_TRAINER_EXPORT_H

#include "data/tokenizer.h"
#include "trainer/config/config.h"
#include "trainer/model/params.h"

// AUTO and HF are requests (HF: the stock class or an error); the rest are what gets written.
typedef enum { EXPORT_AUTO, EXPORT_HF, EXPORT_HF_BERT, EXPORT_HF_GPT2, EXPORT_MHETRAIN } ExportFormat;

typedef struct {
    const char *checkpoint;  // a step_* directory or a run's output directory
    const char *out_dir;
    int force;             // replace a non-empty out_dir (whole, once the new export is complete)
    const char *tokenizer;   // overrides the config's data.tokenizer (NULL: use the config's)
    int no_tokenizer;        // write no tokenizer files
    ExportFormat format;     // EXPORT_AUTO picks the stock class when the model matches one
} ExportOptions;

// The whole export; user errors exit 2 with a message, I/O failures exit 1.
void export_run(const ExportOptions *opt);

// The stock transformers class this config maps onto exactly, or EXPORT_MHETRAIN.
ExportFormat export_native_format(const Config *cfg);
// When the requested `format` cannot represent cfg: a message saying why, else NULL.
const char *export_format_unsupported(const Config *cfg, ExportFormat format);

// The head a checkpoint carries: the pretraining head (MLM / LM), or the fine-tuning head of
// issue 14 (task.* tensors: task.classifier with 1 output = regression, task.qa = span).
typedef enum { EXPORT_HEAD_LM, EXPORT_HEAD_CLASSIFICATION, EXPORT_HEAD_REGRESSION, EXPORT_HEAD_SPAN } ExportHeadKind;
typedef struct {
    ExportHeadKind kind;
    int num_labels;  // classification / regression outputs; 2 for span; 0 for LM
} ExportHead;
ExportHead export_head(const Config *cfg, const ParamTable *t);
// config.json's architectures[0] (e.g. BertForSequenceClassification, MheForQuestionAnswering)
// and the Auto class that loads it.
const char *export_class_name(const Config *cfg, ExportFormat format, const ExportHead *head);
const char *export_auto_class(const Config *cfg, const ExportHead *head);

// The pieces (export_hf.c): weights under the format's names, and config.json.
void export_write_weights(const Config *cfg, const ParamTable *t, const float *params, ExportFormat format,
                          const char *path);
void export_write_config(const Config *cfg, ExportFormat format, const ExportHead *head, const Tokenizer *tok,
                         const char *path);

// The name modeling_mhe.py gives canonical parameter `canon` (mhetrain format): `mhe.` + canon,
// `.weight` after the embedding tables, MLM head as is, task heads under BERT / GPT-2 names.
void export_mhetrain_name(const char *canon, Arch arch, char *out, size_t n);

// The BertForMaskedLM name ("bert.encoder.layer.0.attention.self.query.weight") of a canonical
// parameter name; also used by import.c to read Hugging Face BERT folders.
void export_bert_name(const char *canon, char *out, size_t n);

// `o` printed to `path` with a final newline (config.json, the tokenizer's JSON files).
struct cJSON;
void export_write_json(const char *path, const struct cJSON *o);

// export_tokenizer.c: tokenizer.json (+ vocab files), tokenizer_config.json and
// special_tokens_map.json, so AutoTokenizer gives the ids mhetrain trained on ([CLS] … [SEP]
// around WordPiece text).
void export_write_tokenizer(const Tokenizer *tok, const Config *cfg, const char *dir);

// export_card.c: DIR/README.md saying what the model is and how to load it.
void export_write_card(const Config *cfg, ExportFormat format, const ExportHead *head, const char *checkpoint,
                       int with_tokenizer, const char *path);

// Copies trainer/hf/{configuration,modeling}_mhe.py and the model's attention/<type>.py (as
// mhe_attention.py) into dir (looked up in
// $MHE_HF_DIR, next to the executable's ../share/mhetrain/hf or ../trainer/hf, then the source
// tree this binary was built from).
void export_copy_modeling_files(const char *dir, const Config *cfg);

#endif
