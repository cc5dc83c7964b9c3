"""mhetrain prepare's reader of parquet and Arrow files (data/corpus_arrow.c runs it; the
build embeds this file in the binary).

  python3 -c <this file> FILE FORMAT TEXT_COLUMN TITLE_COLUMN

FORMAT is parquet or arrow.  Writes one JSON object per row to standard output, {"text": ...}
plus "title" when the file has TITLE_COLUMN, in row order, one record batch in memory at a
time: parquet row group by row group, Arrow (a `datasets` cache: the IPC stream format; the
IPC file format too) batch by batch through a memory map.  Bad input: one line on standard
error naming the file and the row or column, exit 2.
"""
import json
import sys


def fail(msg):
    sys.stderr.write("%s\n" % msg)
    sys.exit(2)


def batches(path, fmt, pa, columns_of):
    if fmt == "parquet":
        import pyarrow.parquet as pq
        f = pq.ParquetFile(path)
        cols = columns_of(f.schema_arrow)
        # Small batches: Wikipedia rows are a few KB each, so 256 rows keep memory at a few MB
        # whatever the row-group size.
        yield from f.iter_batches(batch_size=256, columns=cols)
        return
    src = pa.memory_map(path, "r")
    magic = src.read(6)
    src.seek(0)
    if magic == b"ARROW1":
        r = pa.ipc.open_file(src)
        columns_of(r.schema)
        for i in range(r.num_record_batches):
            yield r.get_batch(i)
    else:
        r = pa.ipc.open_stream(src)
        columns_of(r.schema)
        yield from r


def main(argv):
    if len(argv) != 5:
        fail("arrow_bridge: usage: FILE parquet|arrow TEXT_COLUMN TITLE_COLUMN")
    path, fmt, text_col, title_col = argv[1:]
    try:
        import pyarrow as pa
        import pyarrow.types as pt
    except ImportError as e:
        fail("%s: reading %s files needs pyarrow in %s (%s); run launch/setup.sh, or pip install "
             "pyarrow, or set MHE_PYTHON to a Python that has it" % (path, fmt, sys.executable, e))
    use_title = []

    def columns_of(schema):
        names = schema.names
        if text_col not in names:
            fail("%s: no column \"%s\" (columns: %s); name the text column with --text-column"
                 % (path, text_col, ", ".join(names)))
        for c in [text_col] + ([title_col] if title_col in names else []):
            t = schema.field(c).type
            if not (pt.is_string(t) or pt.is_large_string(t)):
                fail("%s: column \"%s\" is %s, expected a string column" % (path, c, t))
        if title_col in names:
            use_title.append(True)
        return [text_col] + ([title_col] if use_title else [])

    def first_bad_row(b, names):
        """The batch row and column of the first value that is not UTF-8 (to_pylist only says
        that one is, not where)."""
        for j in range(b.num_rows):
            for name in names:
                try:
                    b.column(b.schema.get_field_index(name))[j].as_py()
                except UnicodeError as e:
                    return j, name, e
        return 0, names[0], None

    out = sys.stdout
    row = 0
    try:
        for b in batches(path, fmt, pa, columns_of):
            try:
                texts = b.column(b.schema.get_field_index(text_col)).to_pylist()
                titles = b.column(b.schema.get_field_index(title_col)).to_pylist() if use_title else None
            except UnicodeError as e:
                j, name, err = first_bad_row(b, [text_col] + ([title_col] if use_title else []))
                fail("%s: row %d: invalid UTF-8 in column \"%s\" (%s)" % (path, row + j + 1, name, err or e))
            for i, text in enumerate(texts):
                row += 1
                if text is None:
                    fail("%s: row %d: column \"%s\" is null" % (path, row, text_col))
                rec = {"text": text}
                if titles is not None and titles[i] is not None:
                    rec["title"] = titles[i]
                out.write(json.dumps(rec, ensure_ascii=False))
                out.write("\n")
        out.flush()
    except BrokenPipeError:
        # The reader stopped (it reported its own error): nothing more to say.
        sys.exit(1)
    except UnicodeError as e:
        fail("%s: row %d: invalid UTF-8 in a string column (%s)" % (path, row + 1, e))
    except (pa.ArrowException, OSError) as e:
        fail("%s: not a readable %s file: %s" % (path, fmt, str(e).splitlines()[0] if str(e) else type(e).__name__))


main(sys.argv)
