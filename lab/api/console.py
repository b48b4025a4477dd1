"""The instructor's console: one HTML page (no build step) that polls GET /_lab/state, and the
scripts it loads from the host's Debian packages (GET /_lab/assets/NAME), never from the internet.

The metrics view draws with Chart.js 3.9 from Debian's libjs-chart.js (scripts/host-setup.sh
installs it). Without the package the asset is a 404 whose message says how to install it, and the
page shows its tables only."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import NamedTuple

from lab.api.model import ApiError

PAGE = Path(__file__).with_name("console.html")
# An asset's URL names the package's file, whose contents change only with the package: a browser
# may keep it for a week (private: under `serve --auth` it came with the instructor's key).
ASSET_CACHE = "private, max-age=604800"


class Asset(NamedTuple):
    path: Path
    content_type: str
    package: str  # the Debian package that ships it


ASSETS: dict[str, Asset] = {
    "chart.min.js": Asset(Path("/usr/share/javascript/chart.js/chart.min.js"), "text/javascript; charset=utf-8",
                          "libjs-chart.js"),
}


@cache
def page() -> bytes:
    return PAGE.read_bytes()


def asset(name: str) -> tuple[bytes, str]:
    """(contents, content type) of /_lab/assets/NAME; a 404 ApiError naming the package when it is missing."""
    a = ASSETS.get(name)
    if a is None:
        raise ApiError("ResourceNotFound", f"asset {name[:100]!r}: the console's assets are "
                       + ", ".join(f"/_lab/assets/{k}" for k in ASSETS), 404)
    try:
        return a.path.read_bytes(), a.content_type
    except OSError:
        raise ApiError("ResourceNotFound", f"asset {name}: {a.path} is missing; fix: apt-get install -y {a.package} "
                       "(or scripts/host-setup.sh); the console shows tables instead of charts until then", 404) from None
