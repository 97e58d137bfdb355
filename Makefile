# gridha: PGXS build. `make test` runs every suite on a throwaway cluster,
# `make bench` the benchmarks; both install what they need first.

EXTENSION = gridha
MODULE_big = gridha
OBJS = src/gridha.o src/spi_util.o src/instances.o src/claims.o src/queue.o src/status.o
DATA = sql/gridha--1.0.sql
DOCS = README.md

REGRESS = api claims lifecycle errors
REGRESS_OPTS = --load-extension=gridha

PG_CONFIG ?= $(shell test -x /usr/lib/postgresql/15/bin/pg_config && echo /usr/lib/postgresql/15/bin/pg_config || echo pg_config)
PG_CPPFLAGS = -Isrc
PG_CFLAGS = -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers -Wno-sign-compare
SHLIB_LINK =

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

.PHONY: test bench

test:
	bash test/run.sh

bench:
	bash test/bench/run.sh
