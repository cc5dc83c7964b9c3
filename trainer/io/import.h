// Import (issue 15): a Hugging Face folder -> an mhetrain run directory.
//   BertForMaskedLM / BertModel (post-LN BERT)  and  GPT2LMHeadModel / GPT2Model (pre-LN GPT-2)
// read from config.json, model.safetensors or model.safetensors.index.json + shards, and the
// tokenizer files; written as RUN_DIR/checkpoints/step_00000000/ (a normal weights-only
// checkpoint: eval, export, train.init_from, params accept it), RUN_DIR/config.yaml (the same
// resolved config) and RUN_DIR/tokenizer/ (the copied tokenizer files, named by data.tokenizer).
// Tensors are copied bit for bit (fp32; bf16 widens exactly), so `mhetrain export` of the
// result writes the original tensors again.
//
// Refused with one line naming the file (and tensor): a pickled pytorch_model.bin (no
// safetensors), a config mhetrain cannot represent (relative position embeddings, a decoder
// BERT, an untied output layer, GPT-2's per-layer score scaling, other activations), a tensor
// missing, misshapen, of another dtype, or not known.
#ifndef MHE_TRAINER_IMPORT_H
#define MHE_TRAINER_IMPORT_H

typedef struct {
    const char *hf_dir;   // the Hugging Face folder
    const char *out_dir;  // the run directory to create
    int force;            // replace a non-empty out_dir (whole, once the import is complete)
} ImportOptions;

// The whole import; user errors exit 2 with a message, I/O failures exit 1.
void import_run(const ImportOptions *opt);

#endif
