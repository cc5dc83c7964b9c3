#!/usr/bin/env bash
# compute-sanitizer ARGS... judged on the sanitizer's verdict alone: exit 1 when it reports errors
# (it exits 9, the --error-exitcode check.sh gives it), 0 otherwise, whatever the program's status.
compute-sanitizer "$@"
[ $? -ne 9 ]
