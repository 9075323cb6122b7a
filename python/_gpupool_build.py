"""The build backend of gpupool's Python package (PEP 517), standard library only.

`pip install ./python` builds a wheel with it and needs nothing from a
package index, so it works offline and with pip's default build isolation.
The wheel holds the gpupool package and a copy of libgpupool.so: the file
named by GPUPOOL_LIBRARY at install time, else the repository's release
build, build/release/libgpupool.so; a file that is not an ELF shared object
exporting gpupool's C API is refused. Without either, the wheel holds the
Python code only and the package looks for the library at run time
(GPUPOOL_LIBRARY, then the system's loader path); see docs/python.md.
"""
import base64
import hashlib
import io
import os
import re
import sys
import sysconfig
import tarfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
RELEASE_BUILD = os.path.join(HERE, "..", "build", "release", "libgpupool.so")


def _project():
    with open(os.path.join(HERE, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    section = text.split("[project]", 1)[1]
    name = re.search(r'^name\s*=\s*"([^"]+)"', section, re.M).group(1)
    version = re.search(r'^version\s*=\s*"([^"]+)"', section, re.M).group(1)
    return name, version


ET_DYN = 3  # an ELF file's e_type for a shared object


def _check_library(path, what):
    """Refuses (RuntimeError) a file that is not an ELF shared object, or one
    that is but not libgpupool (every version exports gpupool_last_error),
    rather than installing it for the first call to fail on."""
    with open(path, "rb") as fh:
        data = fh.read()
    order = {1: "little", 2: "big"}.get(data[5]) if len(data) >= 18 else None
    if data[:4] != b"\x7fELF" or not order or int.from_bytes(data[16:18], order) != ET_DYN:
        raise RuntimeError(f"{what}: not an ELF shared object; name the libgpupool.so that cmake "
                           "built (build/release/libgpupool.so)")
    if b"gpupool_last_error\0" not in data:  # in the dynamic symbol names, even when stripped
        raise RuntimeError(f"{what}: not a gpupool library (it has no gpupool_last_error); name "
                           "the libgpupool.so that cmake built (build/release/libgpupool.so)")


def _library():
    named = os.environ.get("GPUPOOL_LIBRARY")
    if named:
        if not os.path.isfile(named):
            raise RuntimeError(f"GPUPOOL_LIBRARY={named}: no such file")
        _check_library(named, f"GPUPOOL_LIBRARY={named}")
        return os.path.realpath(named)
    if os.path.isfile(RELEASE_BUILD):
        _check_library(RELEASE_BUILD, os.path.realpath(RELEASE_BUILD))
        return os.path.realpath(RELEASE_BUILD)
    sys.stderr.write("gpupool: no build/release/libgpupool.so and no GPUPOOL_LIBRARY: the wheel "
                     "holds no library; the package will look for one at run time\n")
    return None


def _metadata(name, version):
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    return (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            "Summary: gpupool's caching device-memory pool for PyTorch, with torch.cuda's memory "
            "calls\nRequires-Python: >=3.8\nDescription-Content-Type: text/markdown\n\n" + readme)


def _package_files():
    pkg = os.path.join(HERE, "gpupool")
    return sorted(f for f in os.listdir(pkg) if f.endswith(".py"))


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name, version = _project()
    library = _library()
    if library:
        platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
        tag, purelib = f"py3-none-{platform}", "false"
    else:
        tag, purelib = "py3-none-any", "true"
    dist_info = f"{name}-{version}.dist-info"
    files = []
    for f in _package_files():
        with open(os.path.join(HERE, "gpupool", f), "rb") as fh:
            files.append((f"gpupool/{f}", fh.read()))
    if library:
        with open(library, "rb") as fh:
            files.append(("gpupool/libgpupool.so", fh.read()))
    files.append((f"{dist_info}/METADATA", _metadata(name, version).encode()))
    files.append((f"{dist_info}/WHEEL", (f"Wheel-Version: 1.0\nGenerator: _gpupool_build\n"
                                         f"Root-Is-Purelib: {purelib}\nTag: {tag}\n").encode()))
    files.append((f"{dist_info}/top_level.txt", b"gpupool\n"))
    record = [_record_line(a, d) for a, d in files] + [f"{dist_info}/RECORD,,"]
    files.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    wheel_name = f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w",
                         zipfile.ZIP_DEFLATED) as zf:
        for arcname, data in files:
            info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if arcname.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return wheel_name


def build_sdist(sdist_directory, config_settings=None):
    name, version = _project()
    base = f"{name}-{version}"
    sdist_name = f"{base}.tar.gz"
    sources = ["pyproject.toml", "README.md", "_gpupool_build.py"]
    sources += [os.path.join("gpupool", f) for f in _package_files()]
    with tarfile.open(os.path.join(sdist_directory, sdist_name), "w:gz") as tf:
        for rel in sources:
            tf.add(os.path.join(HERE, rel), arcname=f"{base}/{rel}")
        pkg_info = _metadata(name, version).encode()
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size = len(pkg_info)
        tf.addfile(info, io.BytesIO(pkg_info))
    return sdist_name
