"""What ``s2b index``, ``query``, ``delete``, ``verify``, ``eval`` and ``serve`` do.

The parser and ``main`` are :mod:`.commands` (light: ``s2b --version`` imports
nothing else); it imports this module when one of these commands runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, TextIO

from langchain_s2b import evaluation
from langchain_s2b.cli import display, health, indexer, models, progress, serve
from langchain_s2b.cli.errors import (
    DamagedDatabaseError,
    UserError,
    damaged_store,
    one_line,
    safe,
    safe_json,
    shown_name,
    unescape_name,
)
from langchain_s2b.cli.folder import LISTING_FILE, counts_line, read_listing, unreadable
from langchain_s2b.cli.index_dir import (
    DB_FILE,
    Store,
    open_or_create,
    open_store,
    salvageable,
    writer_lock,
)
from langchain_s2b.cli.loaders import SUFFIXES, Found, find_files, own_path, resolved
from langchain_s2b.cli.options import EMBEDDING_ENV, TOKEN_ENV
from langchain_s2b.cli.querying import (
    TOKEN_COUNTERS,
    cut_question,
    damaged,
    no_results,
    query_options,
)
from langchain_s2b.core.hits import MissingNodeError
from langchain_s2b.core.keys import encode_source_key, manifest_key
from langchain_s2b.store.sqlite import Damage, Database

EXIT_SKIPPED = 3


def wanted_embedding(args: argparse.Namespace) -> str | None:
    """``--embedding``, else ``$S2B_EMBEDDING`` (empty means unset), else ``None``."""
    return args.embedding or os.environ.get(EMBEDDING_ENV) or None


def _damaged(store: Store, what: str) -> UserError:
    return damaged_store(store.directory, what)


def _restore(store: Store, *, read_only: bool = False) -> None:
    """FAISS for the last commit (its file, else built once); damage it sees is one line.

    A writer also counts the chunks whose vector row is gone (one query over
    the leaves): a command that only reads answers from the FAISS file without
    reading every leaf, and finds damage only where its search leads it.
    """
    store.restore(read_only=read_only)
    _note_file_problem(store)
    left = store.index.unrestored
    if left:
        raise _damaged(store, f"{len(left)} chunk(s) without their vector, e.g. {left[0]!r}")
    if not read_only:
        dangling = store.dangling_chunks()
        if dangling:
            raise _damaged(store, f"{dangling} chunk(s) without their vector")


def _note_file_problem(store: Store) -> None:
    """One line when the FAISS file of the last commit was damaged: what this run did about it."""
    problem = store.index.file_problem
    if problem is None:
        return
    where = store.directory
    if not store.index.file_written:
        did = (
            "this run built the index from the database in memory (the file could not be "
            "written again: every command will do the same until s2b verify --repair --store "
            f"{where} writes it)"
        )
    elif store.index._index is None:
        did = "this run removed it (the store holds no chunks: it needs none)"
    else:
        did = "this run built the index from the database and wrote the file again"
    print(
        one_line(
            f"s2b: warning: the FAISS index file of {where} is damaged ({problem}); {did}; "
            f"check the disk, and the rest of the store with s2b verify --store {where}"
        ),
        file=sys.stderr,
    )


@contextmanager
def _reading(store: Store) -> Iterator[Store]:
    """One snapshot of the store for the whole command; a damaged store is one line."""
    try:
        with store.db.read():
            _restore(store, read_only=True)
            yield store
    except MissingNodeError as err:
        raise damaged(store.directory, err) from None
    except (LookupError, TypeError) as err:  # a stored value that is not what it should be
        where = store.directory
        msg = (
            f"the index in {where} could not be read ({type(err).__name__}: {err}); "
            f"check it: s2b verify --store {where}"
        )
        raise UserError(msg) from None
    finally:
        store.close()


# Commands --------------------------------------------------------------------------


def _on_skip(path: str, reason: str) -> None:
    print(one_line(f"s2b: skipped {shown_name(path)}: {reason}"), file=sys.stderr)


def _on_note(path: str, note: str) -> None:
    print(one_line(f"s2b: note: {shown_name(path)}: {note}"), file=sys.stderr)


def cmd_index(args: argparse.Namespace, out: TextIO) -> int:
    """``s2b index PATH... --store DIR``."""
    clock = progress.Clock()
    directory = Path(args.store)
    found = find_files(args.paths, exclude=directory)
    if not found.files and (not found.folders or not (directory / "s2b.sqlite").exists()):
        raise UserError(_nothing_to_index(args.paths, found, directory))
    with writer_lock(directory, wait=not args.no_wait):
        store = open_or_create(
            directory,
            wanted_embedding(args),
            search=False,
            headers=args.headers,
            context_model=args.context_model,
            proxies=args.proxies,
            proxy_model=args.proxy_model,
        )
        try:
            _restore(store)
            done = indexer.run(
                store,
                found,
                strict=args.strict,
                on_skip=_on_skip,
                on_note=_on_note,
                progress=progress.bar,
                save=True,
            )
            store.save_index()
        finally:
            store.save_listing()
            store.close()
    if not found.files and not done.removed:  # a folder with nothing to index (nor to remove)
        raise UserError(_nothing_to_index(args.paths, found, directory))
    _report_index(done, found, directory, out)
    if done.added or done.updated or done.removed:
        print(clock.summary(done.chunks, "chunk"), file=out)
    if done.skipped:
        print(
            f"s2b: {len(done.skipped)} file(s) could not be read and were skipped", file=sys.stderr
        )
        return EXIT_SKIPPED
    return 0


def _nothing_to_index(paths: list[str], found: Found, directory: Path) -> str:
    where = " ".join(paths)
    if found.store:
        return (
            f"nothing to index in {where}: the only files there are the store's own "
            f"(--store {directory} is inside it)"
        )
    return f"nothing to index in {where} (looked for {', '.join(SUFFIXES)}){_passed_over(found)}"


def _passed_over(found: Found) -> str:
    parts = [
        f"{found.hidden} hidden (names starting with '.')" if found.hidden else "",
        f"{found.other} of another type" if found.other else "",
        f"{found.special} {_SPECIAL}" if found.special else "",
    ]
    listed = ", ".join(p for p in parts if p)
    return f"; passed over {listed}" if listed else ""


def _report_index(done: indexer.Outcome, found: Found, directory: Path, out: TextIO) -> None:
    files = done.added + done.updated + done.unchanged
    if done.added or done.updated or done.removed:
        reused = done.vectors - done.embedded
        print(
            one_line(
                f"indexed {files} file(s) into {directory}: {done.added} added, "
                f"{done.updated} updated, {done.removed} removed, {done.unchanged} unchanged; "
                f"{done.documents} document(s), {done.chunks} chunk(s), {done.vectors} "
                f"vector(s) ({done.embedded} embedded, {reused} reused)"
            ),
            file=out,
        )
    else:
        print(one_line(f"nothing to do: all {files} file(s) unchanged in {directory}"), file=out)
    parts = [
        f"{found.hidden} hidden (names starting with '.')" if found.hidden else "",
        f"{found.other} of an unsupported type" if found.other else "",
        f"{found.special} {_SPECIAL}" if found.special else "",
        f"{len(done.skipped)} unreadable" if done.skipped else "",
    ]
    skipped = found.hidden + found.other + found.special + len(done.skipped)
    if skipped:
        print(f"skipped {skipped} file(s): {', '.join(p for p in parts if p)}", file=out)
    if found.links:
        print(
            f"read once: {found.links} link(s) to a file this run reads by its real path", file=out
        )


_SPECIAL = "not regular files (FIFOs, sockets, devices, links to none)"


def cmd_query(args: argparse.Namespace, out: TextIO) -> int:
    """``s2b query QUESTION --store DIR``."""
    options = query_options(
        mode=args.mode,
        k=args.k,
        window_size=args.window_size,
        max_tokens=args.max_tokens,
        parent_level=args.parent_level,
        token_counter=args.token_counter,
        min_score=args.min_score,
    )
    with _reading(open_store(Path(args.store), wanted_embedding(args))) as store:
        question, cut = cut_question(store.cache.model, args.question)
        if cut is not None:
            print(one_line(f"s2b: note: {cut}"), file=sys.stderr)
        docs = store.retriever.invoke(question, **options)
    if args.json:
        payload = {
            "query": question,
            "query_cut": cut is not None,
            **options,
            "token_counter": args.token_counter,
            "results": [display.result_json(d, i) for i, d in enumerate(docs, 1)],
        }
        print(safe_json(json.dumps(payload, ensure_ascii=False, indent=2)), file=out)
    elif not docs:
        print(no_results(args.min_score, "--min-score"), file=out)
    elif out.isatty() and display.has_rich():
        display.print_rich(docs, args.max_chars, out)
    else:
        for i, doc in enumerate(docs, 1):
            print(display.plain(doc, i, args.max_chars), file=out)
    return 0


def cmd_delete(args: argparse.Namespace, out: TextIO) -> int:
    """``s2b delete PATH... --store DIR``: remove files (or every file under folders).

    All or nothing: when a path names nothing in the index, nothing is deleted
    and one line names every such path (as ``git rm`` does).
    """
    directory = Path(args.store)
    with writer_lock(directory, wait=not args.no_wait):
        store = open_store(directory, wanted_embedding(args), search=False, writer=True)
        try:
            rows = store.files()
            chosen: dict[str, Any] = {}
            missing = []
            for raw in args.paths:
                hits = _indexed_under(raw, rows)
                chosen.update((p, rows[p]) for p in hits)
                if not hits:
                    missing.append(shown_name(raw))
            if missing:
                are = "is" if len(missing) == 1 else "are"
                msg = (
                    f"{', '.join(missing)} {are} not in the index (see s2b list); "
                    "nothing was deleted"
                )
                raise UserError(msg)
            kept = {s for p, r in rows.items() if p not in chosen for s in r.sources}
            sources = [s for r in chosen.values() for s in r.sources if s not in kept]
            with store.db.write():
                _restore(store)
                store.retriever.delete(sources)
                for path in chosen:
                    store.drop_file(path)
            store.cache.collect_garbage(store.index.released)
            store.save_index()
        finally:
            store.save_listing()
            store.close()
    print(
        one_line(f"deleted {len(chosen)} file(s) ({len(sources)} document(s)) from {directory}"),
        file=out,
    )
    return 0


def _indexed_under(raw: str, rows: dict[str, Any]) -> list[str]:
    """The indexed files that ``raw`` names: the file, or every file under the folder.

    ``raw`` is taken as typed, else as ``s2b list`` shows a name with escapes
    (:func:`~.errors.unescape_name`); each as its real path, and as its own
    path in its real folder (a link inside an indexed folder is indexed under
    its own name).
    """
    for text in dict.fromkeys([raw, unescape_name(raw)]):
        for path in dict.fromkeys([str(resolved(text)), str(own_path(text))]):
            under = path.rstrip(os.sep) + os.sep
            hits = [p for p in rows if p == path or p.startswith(under)]
            if hits:
                return hits
    return []


def cmd_verify(args: argparse.Namespace, out: TextIO) -> int:
    """``s2b verify --store DIR [--repair]``: every row, digest and document checked."""
    directory = Path(args.store)
    lock = (
        writer_lock(directory, wait=not args.no_wait, repair=True) if args.repair else nullcontext()
    )
    with lock:
        try:
            store = open_store(
                directory, wanted_embedding(args), writer=args.repair, contexts=args.repair
            )
        except DamagedDatabaseError:
            if not args.repair:
                raise
            return _rebuild(directory, None, wanted_embedding(args), out)
        try:
            try:
                found, counts = health.check(store, repair=args.repair)
            except sqlite3.DatabaseError as err:  # a page that the check can not read
                if not unreadable(err, directory):
                    raise
                found, counts = health.Health(Damage(database=[str(err)])), None
            _report_health(found, counts, out, directory)
            if found.damage.database:
                return _damaged_file(store, found, args, out)
            if not args.repair:
                if found.ok:
                    print("ok", file=out)
                    return 0
                repair = f"s2b verify --repair --store {directory}"
                print(f"s2b: error: {directory} is damaged; run: {repair}", file=sys.stderr)
                return 1
            code = _after_repair(store, found, out)
            store.save_index(replace=found.index_file or found.file_problem is not None)
            store.save_listing()
            return code
        finally:
            store.close()


def _report_health(
    found: health.Health, counts: dict[str, int] | None, out: TextIO, directory: Path
) -> None:
    report = found.report
    nodes = f", {report.nodes} node(s)" if report is not None else ""
    if counts is not None:
        print(f"{counts_line(counts)}{nodes}", file=out)
    problems = _problems(found)
    if problems:
        print(f"damaged: {', '.join(problems)}", file=out)
    if found.damage.unchecked:
        print(
            f"{found.damage.unchecked} vector(s) have no digest yet (an older store): "
            "the next s2b index or verify --repair adds them",
            file=out,
        )
    if found.unrecorded:
        print(
            "the FAISS index file has no recorded digest: the run that wrote it could not "
            "record it (another run was writing, or the disk was full), or an older s2b wrote "
            "it; the next s2b index or verify --repair records it",
            file=out,
        )
    if found.unlisted:  # each writer writes it at its end, best effort: a full disk leaves none
        print(
            f"no {directory / LISTING_FILE}: the last run that wrote the store could not write "
            "it (a full disk?), or an older s2b made the store; the next s2b index or verify "
            "--repair writes it",
            file=out,
        )


def _problems(found: health.Health) -> list[str]:
    damage, report = found.damage, found.report
    counted = [
        (len(damage.database), "problem(s) in the database file"),
        (len(damage.unreadable), "unreadable row(s)"),
        (len(damage.vectors), "vector(s) whose bytes changed"),
        (len(damage.children), "chunk(s) without their vector"),
        (len(found.bad_files), "damaged file record(s)"),
    ]
    if report is not None:
        missing = {*report.missing_nodes, *report.missing_children}
        counted += [
            (len(report.bad_digests), "document(s) whose text, metadata or manifest changed"),
            (len(report.bad_nodes), "document(s) with changed nodes"),
            (len(missing), "document(s) with missing pieces"),
            (len(report.orphan_nodes) + len(report.orphan_children), "orphan(s)"),
            (len(report.bad_manifests), "bad manifest(s)"),
            (len(report.lexical_missing), "chunk(s) missing from the lexical index"),
            (len(report.lexical_orphans), "lexical index row(s) of no chunk"),
        ]
    counted += [
        (len(found.lost), "file(s) with lost documents"),
        (len(found.unowned), "document(s) no indexed file holds"),
        (int(found.index_file), "FAISS index file that does not match the database"),
        (int(found.file_problem is not None), f"damaged FAISS index file ({found.file_problem})"),
        (int(found.listing is not None), f"damaged {LISTING_FILE} ({found.listing})"),
    ]
    return [f"{n} {what}" for n, what in counted if n]


def _damaged_file(store: Store, found: health.Health, args: argparse.Namespace, out: TextIO) -> int:
    """The database file itself is damaged: say so, or index the files into a new one."""
    where = store.directory
    first = one_line(found.damage.database[0])
    if not args.repair:
        msg = (
            f"the database file in {where} is damaged ({first}); run: s2b verify --repair "
            f"--store {where} (it indexes the files again into a new database file)"
        )
        raise UserError(msg)
    return _rebuild(where, store, wanted_embedding(args), out)


def _rebuild(directory: Path, store: Store | None, wanted: str | None, out: TextIO) -> int:
    """Index the files again into a new database file (``store``: the damaged one, if it opened).

    Without an open store, the settings and the files come from ``s2b.json``
    (and whatever the damaged file still lets be read). Call under the writer lock.
    """
    damaged: Database | None
    embedded = None
    if store is not None:
        spec, model, damaged = store.spec, store.cache.model, store.db
        embedded = store.embedded
    else:
        spec = _listed_spec(directory, wanted)
        model, damaged = models.make_embedding(spec), salvageable(directory)
    done = health.rebuild(
        directory,
        spec,
        model,
        damaged,
        on_skip=_on_skip,
        progress=progress.bar,
        embedded=embedded,
    )
    fresh = open_store(directory, spec, embedding=model, search=False, writer=True)
    try:
        _restore(fresh)
        fresh.save_index()
        fresh.save_listing()
    finally:
        fresh.close()
    source = f", as {LISTING_FILE} lists them" if done.listed else ""
    print(
        f"rebuilt: {done.done.added} file(s) indexed again into a new database file{source} "
        f"({done.vectors} vector(s) kept from the damaged one, {done.done.embedded} embedded)",
        file=out,
    )
    if done.aside is not None:
        print(one_line(f"the damaged database file is kept as {done.aside}"), file=out)
    for path in done.gone:
        print(
            one_line(f"s2b: could not rebuild {shown_name(path)}: the file is gone"),
            file=sys.stderr,
        )
    if not done.complete:
        print(
            "s2b: the list of indexed files could be read only in part: index your folders "
            f"again into --store {directory} to add the rest",
            file=sys.stderr,
        )
    return EXIT_SKIPPED if done.gone or done.done.skipped or not done.complete else 0


def _listed_spec(directory: Path, wanted: str | None) -> str:
    """The store's embedding as ``s2b.json`` records it; one line when it can not say."""
    where = directory / DB_FILE
    listing = read_listing(directory)
    if listing is None:
        msg = (
            f"cannot repair {where}: it can not be read, and there is no {LISTING_FILE} beside "
            "it to say which model the store uses and which files it indexed (a store made by "
            f"an older s2b); index your files into a new --store"
        )
        raise UserError(msg)
    recorded = listing.settings.get("embedding", "")
    try:
        spec = models.parse_spec(recorded)
    except UserError:
        msg = f"cannot repair {where}: {directory / LISTING_FILE} names no embedding"
        raise UserError(msg) from None
    if wanted is not None and models.parse_spec(wanted) != spec:
        msg = (
            f"{directory} was indexed with embedding {spec!r}, not {models.parse_spec(wanted)!r};"
            f" repair it with --embedding {spec} (or none)"
        )
        raise UserError(msg)
    return spec


def _after_repair(store: Store, found: health.Health, out: TextIO) -> int:
    """Read the files of lost documents again; name those that are gone."""
    report = found.report
    assert report is not None
    files = list(dict.fromkeys(found.lost + found.bad_files))
    done, gone = health.reread(store, files, on_skip=_on_skip, progress=progress.bar)
    store.cache.collect_garbage()
    if found.ok:
        print("ok", file=out)
        return 0
    rows = len(found.damage.unreadable) + len(found.damage.vectors) + len(found.damage.children)
    refaiss = found.index_file or found.file_problem is not None
    orphans = len(report.orphan_nodes) + len(report.orphan_children)
    print(
        f"repaired: {len(report.rebuilt)} document(s) rebuilt from their stored text, "
        f"{len(report.removed) + len(found.unowned)} removed, {rows} damaged row(s) and "
        f"{orphans} orphan(s) deleted; {len(files) - len(gone)} file(s) read again from disk"
        + ("; the FAISS index file written again" if refaiss else "")
        + (f"; {LISTING_FILE} written again" if found.listing is not None else ""),
        file=out,
    )
    for path in gone:
        print(
            one_line(
                f"s2b: could not rebuild {shown_name(path)}: the file is gone; its documents "
                "left the index"
            ),
            file=sys.stderr,
        )
    return EXIT_SKIPPED if gone or done.skipped else 0


def cmd_eval(args: argparse.Namespace, out: TextIO) -> int:
    """``s2b eval --store DIR --questions FILE``."""
    try:
        questions = evaluation.load_questions(args.questions, limit=args.limit)
    except OSError as err:
        msg = f"cannot read {args.questions}: {err.strerror or err}"
        raise UserError(msg) from None
    if not questions:
        msg = f"no questions in {args.questions}"
        raise UserError(msg)
    with _reading(open_store(Path(args.store), wanted_embedding(args))) as store:
        _warn_absent_documents(store, questions)
        retriever = store.retriever
        rows: dict[str, Any] = {"sentences (plain chunks)": retriever.vectorstore.as_retriever()}
        for mode in args.modes:
            rows[mode] = retriever.model_copy(update={"mode": mode})
        reports = []
        budgets = tuple(args.budgets or evaluation.BUDGETS)
        for n, (name, row) in enumerate(rows.items(), 1):  # each row counts the questions
            bar = progress.bar(len(questions), "question", f"evaluating {n}/{len(rows)}: {name}")
            try:
                reports.append(
                    evaluation.evaluate(
                        row, questions, name=name, k=args.k, budgets=budgets,
                        token_counter=TOKEN_COUNTERS[args.token_counter], progress=bar.update,
                    )
                )  # fmt: skip
            finally:
                bar.close()
    if args.json:
        fields = ("name", "k", "n", "hit_rate", "answer_rate", "evidence_recall", "mean_tokens")
        data = [{f: getattr(r, f) for f in fields} | {"hit_at": r.hit_at} for r in reports]
        print(json.dumps(data, indent=2), file=out)
    else:
        print(f"{len(questions)} questions, k={args.k}; rates in %\n", file=out)
        print(safe(evaluation.markdown_table(reports)), file=out)
    return 0


def cmd_serve(args: argparse.Namespace, out: TextIO) -> int:
    """``s2b serve --store DIR [--http HOST:PORT] [--token T]``: the index as an MCP server."""
    token = args.token or os.environ.get(TOKEN_ENV) or None
    if args.token and args.http is None:
        msg = "--token protects --http; over stdio only the client that starts s2b can reach it"
        raise UserError(msg)
    try:
        return serve.run(Path(args.store), wanted_embedding(args), http=args.http, token=token)
    except KeyboardInterrupt:
        return 0


def _warn_absent_documents(store: Store, questions: Sequence[evaluation.Question]) -> None:
    """One line naming the questions whose document is not in the store (they score 0)."""
    wanted = list(dict.fromkeys(q.doc_id for q in questions))
    manifests = store.docstore.mget([manifest_key(encode_source_key(d)) for d in wanted])
    absent = {d for d, m in zip(wanted, manifests, strict=True) if m is None}
    if absent:
        about = [q for q in questions if q.doc_id in absent]
        print(
            one_line(
                f"s2b: warning: {len(about)} of {len(questions)} question(s) are about "
                f"{len(absent)} document(s) not in {store.directory} (e.g. doc_id "
                f"{about[0].doc_id!r}); they score 0"
            ),
            file=sys.stderr,
        )


# Command line ----------------------------------------------------------------------
