"""Reading files a store names without trusting them: regular files only (a FIFO or a
device is never opened), names that stay in their folder, HDF5 files that hold their own
data (no external storage, external or soft links, virtual datasets)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from diffract._errors import StoreCorruptError


def is_regular_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a regular file (symlinks followed), checked without opening it.

    Args:
        path: a file path.

    Returns:
        False for a missing path, a folder, a FIFO, a socket or a device.
    """
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def read_head(path: str | os.PathLike[str], n: int) -> bytes | None:
    """The first ``n`` bytes of the regular file ``path``; None for anything else.

    Opened non-blocking, so a FIFO named like a store never blocks the caller.

    Args:
        path: a file path.
        n: how many bytes.

    Returns:
        The bytes, or None when ``path`` is not a readable regular file.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except (OSError, ValueError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, n)
    except OSError:
        return None
    finally:
        os.close(fd)


def require_regular(path: Path, what: str) -> None:
    """Refuse to open ``path`` unless it is a regular file (or missing: the caller's open
    says so).

    Raises:
        StoreCorruptError: ``path`` is a FIFO, socket, device or folder.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreCorruptError(f"{path}: cannot open the {what} ({exc.strerror})") from None
    if not stat.S_ISREG(mode):
        raise StoreCorruptError(f"{path}: the {what} is not a regular file; refusing to open it")


def plain_name(name: str, where: str) -> str:
    """``name`` when it names a file directly inside its folder.

    Raises:
        StoreCorruptError: ``name`` is empty, ``.``/``..``, or holds a path separator or NUL.
    """
    if name in ("", ".", "..") or any(c in name for c in "/\\\x00"):
        raise StoreCorruptError(
            f"{where}: refers to {name!r}, outside its folder; refused (the store is damaged "
            "or crafted)"
        )
    return name


def check_h5(f: Any, file: Path) -> None:
    """Refuse an open HDF5 file whose data may live elsewhere.

    Every link must be a hard link, and no dataset may use external storage or be virtual:
    a store's segment holds its own data, so anything else is damage or a crafted file that
    would read files outside the store.

    Raises:
        StoreCorruptError: naming the first offending object.
    """
    import h5py

    bad: list[str] = []

    def visit(name: str, link: Any) -> Any:
        if not isinstance(link, h5py.HardLink):
            bad.append(f"{name!r} is a {type(link).__name__}")
            return True
        obj = f.get(name)
        if isinstance(obj, h5py.Dataset) and (obj.is_virtual or obj.external):
            bad.append(f"{name!r} keeps its data in other files")
            return True
        return None

    f.visititems_links(visit)
    if bad:
        raise StoreCorruptError(
            f"{file}: {bad[0]}; refused (a store's files hold their own data: the file is "
            "damaged or crafted)"
        )


def h5_dataset(f: Any, path: str, file: Path) -> Any:
    """The dataset ``path`` of the open HDF5 file ``f``, reached through hard links only and
    holding its own data.

    Raises:
        StoreCorruptError: a link on the way is not a hard link, or the dataset's data lives
            elsewhere.
        KeyError: there is no such dataset.
    """
    import h5py

    node = f
    parts = [p for p in path.split("/") if p]
    for i, part in enumerate(parts):
        link = node.get(part, getlink=True)
        if link is None:
            raise KeyError(path)
        if not isinstance(link, h5py.HardLink):
            raise StoreCorruptError(
                f"{file}: {'/'.join(parts[: i + 1])!r} is a {type(link).__name__}; refused"
            )
        node = node[part]
    if not isinstance(node, h5py.Dataset):
        raise KeyError(path)
    if node.is_virtual or node.external:
        raise StoreCorruptError(f"{file}: {path!r} keeps its data in other files; refused")
    _check_holds(node, path, file)
    return node


#: how many times its stored bytes a filtered (compressed) dataset may hold: DEFLATE's
#: limit is about 1032; a store's own datasets are never compressed
MAX_RATIO = 1100


def _check_holds(ds: Any, path: str, file: Path) -> None:
    """Refuse a dataset that claims more data than its file holds, before anything is read:
    a crafted shape over unwritten (fill-valued) storage reads as a huge array of one value
    (an 80 KB file claiming 2e8 elements allocated 4.8 GB).

    Raises:
        StoreCorruptError: naming the dataset, its claimed and stored sizes.
    """
    if ds.dtype.kind not in "biufc" or ds.size == 0:
        return  # text: read element by element; nothing to allocate
    claimed = int(ds.size) * ds.dtype.itemsize
    stored = int(ds.id.get_storage_size())
    filtered = ds.id.get_create_plist().get_nfilters() > 0
    limit = stored * MAX_RATIO if filtered else stored
    try:
        size = os.path.getsize(file)
    except OSError:
        size = stored
    if claimed > limit or stored > size:
        raise StoreCorruptError(
            f"{file}: {path!r} claims {int(ds.size)} {ds.dtype} values of shape "
            f"{list(ds.shape)}, {claimed} bytes, but stores {stored} bytes in a file of {size}; "
            "refused before reading: the file is damaged or crafted"
        )
