"""The built-in stdlib corpus: one command from the interpreter's library to training datasets."""


from megatron.data.stdlib_corpus import stdlib_python_files


def test_library_files_are_sorted_and_tests_are_optional():
    files = stdlib_python_files()
    assert files == sorted(files) and "os.py" in files and "json/decoder.py" in files
    assert not any("site-packages" in f or f.split("/")[-1].startswith("test_") for f in files)
    with_tests = stdlib_python_files(include_tests=True)
    assert set(files) < set(with_tests) and any(f.startswith("test/") for f in with_tests)
