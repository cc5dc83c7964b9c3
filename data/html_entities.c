// HTML character references that occur in Wikipedia's wikitext.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/wikitext.h"

typedef struct {
    const char *name;
    uint32_t cp;
} Entity;

// The references Wikipedia editors actually use (the full HTML5 table is 2,000 names; these
// cover typography, Latin letters, Greek and mathematics).
static const Entity ENTITIES[] = {
    {"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''},
    {"nbsp", ' '}, {"ensp", ' '}, {"emsp", ' '}, {"thinsp", ' '}, {"zwj", 0x200D},
    {"zwnj", 0x200C}, {"shy", 0xAD}, {"ndash", 0x2013}, {"mdash", 0x2014},
    {"minus", 0x2212}, {"hellip", 0x2026}, {"lsquo", 0x2018}, {"rsquo", 0x2019},
    {"ldquo", 0x201C}, {"rdquo", 0x201D}, {"sbquo", 0x201A}, {"bdquo", 0x201E},
    {"laquo", 0xAB}, {"raquo", 0xBB}, {"lsaquo", 0x2039}, {"rsaquo", 0x203A},
    {"bull", 0x2022}, {"middot", 0xB7}, {"deg", 0xB0}, {"prime", 0x2032},
    {"Prime", 0x2033}, {"times", 0xD7}, {"divide", 0xF7}, {"plusmn", 0xB1},
    {"frac12", 0xBD}, {"frac14", 0xBC}, {"frac34", 0xBE}, {"sup1", 0xB9},
    {"sup2", 0xB2}, {"sup3", 0xB3}, {"micro", 0xB5}, {"para", 0xB6}, {"sect", 0xA7},
    {"copy", 0xA9}, {"reg", 0xAE}, {"trade", 0x2122}, {"cent", 0xA2}, {"pound", 0xA3},
    {"euro", 0x20AC}, {"yen", 0xA5}, {"dagger", 0x2020}, {"Dagger", 0x2021},
    {"larr", 0x2190}, {"rarr", 0x2192}, {"uarr", 0x2191}, {"darr", 0x2193},
    {"harr", 0x2194}, {"le", 0x2264}, {"ge", 0x2265}, {"ne", 0x2260}, {"asymp", 0x2248},
    {"equiv", 0x2261}, {"infin", 0x221E}, {"sum", 0x2211}, {"prod", 0x220F},
    {"radic", 0x221A}, {"int", 0x222B}, {"part", 0x2202}, {"nabla", 0x2207},
    {"isin", 0x2208}, {"sdot", 0x22C5}, {"and", 0x2227}, {"or", 0x2228},
    {"iexcl", 0xA1}, {"iquest", 0xBF}, {"ordf", 0xAA}, {"ordm", 0xBA}, {"not", 0xAC},
    {"macr", 0xAF}, {"acute", 0xB4}, {"cedil", 0xB8}, {"uml", 0xA8},
    {"Agrave", 0xC0}, {"Aacute", 0xC1}, {"Acirc", 0xC2}, {"Atilde", 0xC3}, {"Auml", 0xC4},
    {"Aring", 0xC5}, {"AElig", 0xC6}, {"Ccedil", 0xC7}, {"Egrave", 0xC8}, {"Eacute", 0xC9},
    {"Ecirc", 0xCA}, {"Euml", 0xCB}, {"Igrave", 0xCC}, {"Iacute", 0xCD}, {"Icirc", 0xCE},
    {"Iuml", 0xCF}, {"ETH", 0xD0}, {"Ntilde", 0xD1}, {"Ograve", 0xD2}, {"Oacute", 0xD3},
    {"Ocirc", 0xD4}, {"Otilde", 0xD5}, {"Ouml", 0xD6}, {"Oslash", 0xD8}, {"Ugrave", 0xD9},
    {"Uacute", 0xDA}, {"Ucirc", 0xDB}, {"Uuml", 0xDC}, {"Yacute", 0xDD}, {"THORN", 0xDE},
    {"szlig", 0xDF}, {"agrave", 0xE0}, {"aacute", 0xE1}, {"acirc", 0xE2}, {"atilde", 0xE3},
    {"auml", 0xE4}, {"aring", 0xE5}, {"aelig", 0xE6}, {"ccedil", 0xE7}, {"egrave", 0xE8},
    {"eacute", 0xE9}, {"ecirc", 0xEA}, {"euml", 0xEB}, {"igrave", 0xEC}, {"iacute", 0xED},
    {"icirc", 0xEE}, {"iuml", 0xEF}, {"eth", 0xF0}, {"ntilde", 0xF1}, {"ograve", 0xF2},
    {"oacute", 0xF3}, {"ocirc", 0xF4}, {"otilde", 0xF5}, {"ouml", 0xF6}, {"oslash", 0xF8},
    {"ugrave", 0xF9}, {"uacute", 0xFA}, {"ucirc", 0xFB}, {"uuml", 0xFC}, {"yacute", 0xFD},
    {"thorn", 0xFE}, {"yuml", 0xFF}, {"OElig", 0x152}, {"oelig", 0x153},
    {"Scaron", 0x160}, {"scaron", 0x161}, {"Yuml", 0x178}, {"fnof", 0x192},
    {"Alpha", 0x391}, {"Beta", 0x392}, {"Gamma", 0x393}, {"Delta", 0x394},
    {"Epsilon", 0x395}, {"Zeta", 0x396}, {"Eta", 0x397}, {"Theta", 0x398}, {"Iota", 0x399},
    {"Kappa", 0x39A}, {"Lambda", 0x39B}, {"Mu", 0x39C}, {"Nu", 0x39D}, {"Xi", 0x39E},
    {"Omicron", 0x39F}, {"Pi", 0x3A0}, {"Rho", 0x3A1}, {"Sigma", 0x3A3}, {"Tau", 0x3A4},
    {"Upsilon", 0x3A5}, {"Phi", 0x3A6}, {"Chi", 0x3A7}, {"Psi", 0x3A8}, {"Omega", 0x3A9},
    {"alpha", 0x3B1}, {"beta", 0x3B2}, {"gamma", 0x3B3}, {"delta", 0x3B4},
    {"epsilon", 0x3B5}, {"zeta", 0x3B6}, {"eta", 0x3B7}, {"theta", 0x3B8}, {"iota", 0x3B9},
    {"kappa", 0x3BA}, {"lambda", 0x3BB}, {"mu", 0x3BC}, {"nu", 0x3BD}, {"xi", 0x3BE},
    {"omicron", 0x3BF}, {"pi", 0x3C0}, {"rho", 0x3C1}, {"sigmaf", 0x3C2}, {"sigma", 0x3C3},
    {"tau", 0x3C4}, {"upsilon", 0x3C5}, {"phi", 0x3C6}, {"chi", 0x3C7}, {"psi", 0x3C8},
    {"omega", 0x3C9},
};

static void put_utf8(StrBuf *out, uint32_t cp) {
    char b[4];
    size_t n;
    if (cp == 0xA0) cp = ' ';
    if (cp < 0x80) {
        b[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (char)(0xC0 | (cp >> 6));
        b[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (char)(0xE0 | (cp >> 12));
        b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        b[0] = (char)(0xF0 | (cp >> 18));
        b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    strbuf_append(out, b, n);
}

size_t html_entity_decode(const char *s, size_t n, StrBuf *out) {
    if (n < 3 || s[0] != '&') return 0;
    size_t end = 1;
    while (end < n && end < 34 && s[end] != ';') end++;
    if (end >= n || s[end] != ';') return 0;
    if (s[1] == '#') {
        char *stop = NULL;
        char digits[40];
        size_t dn = end - 2;
        if (dn == 0 || dn >= sizeof digits) return 0;
        memcpy(digits, s + 2, dn);
        digits[dn] = 0;
        unsigned long cp;
        if (digits[0] == 'x' || digits[0] == 'X')
            cp = strtoul(digits + 1, &stop, 16);
        else
            cp = strtoul(digits, &stop, 10);
        if (!stop || *stop || cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return 0;
        put_utf8(out, (uint32_t)cp);
        return end + 1;
    }
    size_t nl = end - 1;
    for (size_t i = 0; i < sizeof ENTITIES / sizeof ENTITIES[0]; i++) {
        if (strlen(ENTITIES[i].name) == nl && memcmp(ENTITIES[i].name, s + 1, nl) == 0) {
            put_utf8(out, ENTITIES[i].cp);
            return end + 1;
        }
    }
    return 0;
}
