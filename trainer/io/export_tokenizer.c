// Tokenizer files of an export: what tokenizer_save writes, plus the post-processor and the two
// small JSON files AutoTokenizer reads to pick the class and the special tokens.
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fs.h"
#include "trainer/io/export.h"

void export_write_json(const char *path, const cJSON *o) {
    char *text = cJSON_Print(o);
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fputc('\n', f) == EOF || fclose(f) != 0)
        mhe_fatal("export: cannot write %s: %s", path, strerror(errno));
    free(text);
}

static void write_json(const char *dir, const char *file, const cJSON *o) {
    char path[4096];
    mhe_path_join(path, sizeof path, dir, file, "export");
    export_write_json(path, o);
}

static int json_flag(const cJSON *o, const char *key, int dflt) {
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

static cJSON *template_piece(const char *kind, const char *id, int type_id) {
    cJSON *piece = cJSON_CreateObject();
    cJSON *body = cJSON_AddObjectToObject(piece, kind);
    cJSON_AddStringToObject(body, "id", id);
    cJSON_AddNumberToObject(body, "type_id", type_id);
    return piece;
}

static void add_special(cJSON *map, const char *token, int id) {
    cJSON *s = cJSON_AddObjectToObject(map, token);
    cJSON_AddStringToObject(s, "id", token);
    cJSON_AddItemToObject(s, "ids", cJSON_CreateIntArray(&id, 1));
    cJSON_AddItemToObject(s, "tokens", cJSON_CreateStringArray(&token, 1));
}

// BERT's "[CLS] A [SEP]" / "[CLS] A [SEP] B [SEP]" (type ids 0 then 1): what the MLM data
// looks like, so AutoTokenizer(text) gives the ids the model trained on.
static cJSON *bert_post_processor(const char *cls, int cls_id, const char *sep, int sep_id) {
    cJSON *pp = cJSON_CreateObject();
    cJSON_AddStringToObject(pp, "type", "TemplateProcessing");
    cJSON *single = cJSON_AddArrayToObject(pp, "single");
    cJSON_AddItemToArray(single, template_piece("SpecialToken", cls, 0));
    cJSON_AddItemToArray(single, template_piece("Sequence", "A", 0));
    cJSON_AddItemToArray(single, template_piece("SpecialToken", sep, 0));
    cJSON *pair = cJSON_AddArrayToObject(pp, "pair");
    cJSON_AddItemToArray(pair, template_piece("SpecialToken", cls, 0));
    cJSON_AddItemToArray(pair, template_piece("Sequence", "A", 0));
    cJSON_AddItemToArray(pair, template_piece("SpecialToken", sep, 0));
    cJSON_AddItemToArray(pair, template_piece("Sequence", "B", 1));
    cJSON_AddItemToArray(pair, template_piece("SpecialToken", sep, 1));
    cJSON *specials = cJSON_AddObjectToObject(pp, "special_tokens");
    add_special(specials, cls, cls_id);
    if (strcmp(sep, cls) != 0) add_special(specials, sep, sep_id);
    return pp;
}

static void add_token(cJSON *cfg, cJSON *map, const char *key, const Tokenizer *tok, int id) {
    const char *s = id >= 0 ? tokenizer_id_to_token(tok, id) : NULL;
    if (!s) return;
    cJSON_AddStringToObject(cfg, key, s);
    cJSON_AddStringToObject(map, key, s);
}

void export_write_tokenizer(const Tokenizer *tok, const Config *cfg, const char *dir) {
    tokenizer_save(tok, dir);
    char path[4096];
    mhe_path_join(path, sizeof path, dir, "tokenizer.json", "export");
    char *text = mhe_read_file(path, NULL);
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) mhe_fatal("export: %s: tokenizer_save wrote unparsable JSON", path);

    const SpecialIds s = tokenizer_special_ids(tok);
    cJSON *tc = cJSON_CreateObject(), *map = cJSON_CreateObject();
    if (tokenizer_kind(tok) == TOK_WORDPIECE) {
        if (cfg->model.arch == ARCH_BERT && s.cls >= 0 && s.sep >= 0)
            cJSON_ReplaceItemInObjectCaseSensitive(
                root, "post_processor",
                bert_post_processor(tokenizer_id_to_token(tok, s.cls), s.cls, tokenizer_id_to_token(tok, s.sep), s.sep));
        // BertTokenizerFast rebuilds the normalizer when these disagree with tokenizer.json.
        const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
        const int lower = json_flag(norm, "lowercase", tokenizer_lowercase(tok));
        cJSON_AddStringToObject(tc, "tokenizer_class", "BertTokenizer");
        cJSON_AddBoolToObject(tc, "do_lower_case", lower);
        cJSON_AddBoolToObject(tc, "strip_accents", json_flag(norm, "strip_accents", lower));
        cJSON_AddBoolToObject(tc, "tokenize_chinese_chars", json_flag(norm, "handle_chinese_chars", 1));
        cJSON_AddBoolToObject(tc, "clean_up_tokenization_spaces", 1);
        add_token(tc, map, "unk_token", tok, s.unk);
        add_token(tc, map, "sep_token", tok, s.sep);
        add_token(tc, map, "pad_token", tok, s.pad);
        add_token(tc, map, "cls_token", tok, s.cls);
        add_token(tc, map, "mask_token", tok, s.mask);
    } else {
        // GPT2TokenizerFast likewise rebuilds the pre-tokenizer on an add_prefix_space mismatch.
        const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
        cJSON_AddStringToObject(tc, "tokenizer_class", "GPT2Tokenizer");
        cJSON_AddBoolToObject(tc, "add_prefix_space", json_flag(pre, "add_prefix_space", 0));
        cJSON_AddBoolToObject(tc, "add_bos_token", 0);
        cJSON_AddBoolToObject(tc, "clean_up_tokenization_spaces", 1);
        add_token(tc, map, "bos_token", tok, s.eos);
        add_token(tc, map, "eos_token", tok, s.eos);
        add_token(tc, map, "unk_token", tok, s.eos);
    }
    cJSON_AddNumberToObject(tc, "model_max_length", cfg->model.max_seq);
    write_json(dir, "tokenizer.json", root);
    write_json(dir, "tokenizer_config.json", tc);
    write_json(dir, "special_tokens_map.json", map);
    cJSON_Delete(root);
    cJSON_Delete(tc);
    cJSON_Delete(map);
}
