"""bench/run_benchmarks.py's source digest: a function of the plugin's sources alone (CPU only)."""


def test_source_digest_follows_the_plugin_sources(load_script, tmp_path):
    bench = load_script("bench/run_benchmarks.py")
    root = tmp_path / "repo"
    (root / "platforms" / "cuda" / "src").mkdir(parents=True)
    (root / "openmmapi" / "src").mkdir(parents=True)
    (root / "CMakeLists.txt").write_text("project(x)\n")
    kernel = root / "platforms" / "cuda" / "src" / "Kernel.cu"
    kernel.write_text("__global__ void k() {}\n")
    (root / "openmmapi" / "src" / "Force.cpp").write_text("int f();\n")
    first = bench.source_digest(str(root))
    assert len(first) == 16 and int(first, 16) >= 0
    assert bench.source_digest(str(root)) == first

    # Build products, results, other kinds of files and other folders do not count.
    (root / "platforms" / "build-x").mkdir()
    (root / "platforms" / "build-x" / "Kernel.cu").write_text("built")
    (root / "platforms" / "cuda" / "src" / "notes.md").write_text("notes")
    (root / "docs").mkdir()
    (root / "docs" / "example.cpp").write_text("int main() {}\n")
    assert bench.source_digest(str(root)) == first

    # A changed, renamed or added source does.
    kernel.write_text("__global__ void k() { }\n")
    changed = bench.source_digest(str(root))
    assert changed != first
    kernel.rename(kernel.with_name("Renamed.cu"))
    renamed = bench.source_digest(str(root))
    assert renamed not in (first, changed)
    (root / "openmmapi" / "src" / "New.h").write_text("")
    assert bench.source_digest(str(root)) not in (first, changed, renamed)


def test_source_digest_of_the_repository(load_script):
    bench = load_script("bench/run_benchmarks.py")
    assert len(bench.source_digest()) == 16
