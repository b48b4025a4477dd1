"""HyperPod's schedule expressions (ScheduledUpdateConfig.ScheduleExpression), parsed and evaluated.

HyperPod takes `cron(Minutes Hours Day-of-month Month Day-of-week Year)`, all in UTC, in the narrow
form its CloudFormation pattern spells out (`PATTERN`): one minute and one hour; a day of the month
(1-31) or a day of the week (SUN-SAT, 1-7 with 1 = SUN, `L` = the last day of the week, `5L` = the
last Thursday of the month, `3#2` = the second Tuesday), never both: the other one is `?`; a month
(1-12, `*` or `*/N`: every Nth month from January); a year (2020-2099 or `*`). A rate() expression
is not among them. `parse` says what is wrong in words; `Cron.next_after(t)` is the next time the
schedule fires strictly after epoch second `t` (None: never again). Pure: no clock of its own.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
from dataclasses import dataclass

# AWS::SageMaker::Cluster ScheduledUpdateConfig.ScheduleExpression, as CloudFormation documents it
PATTERN = re.compile(
    r"cron\((?:[0-5][0-9]|[0-9]|) (?:[01][0-9]|2[0-3]|[0-9]) (?:[1-9]|0[1-9]|[12][0-9]|3[01]|\?) "
    r"(?:[1-9]|0[1-9]|1[0-2]|\*|\*/(?:[1-9]|1[0-2])|) "
    r"(?:MON|TUE|WED|THU|FRI|SAT|SUN|[1-7]|\?|L|(?:[1-7]#[1-5])|(?:[1-7]L)) (?:20[2-9][0-9]|\*|)\)")
DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")  # 1..7, as AWS counts them
EXAMPLE = "cron(0 3 ? * SUN *) (03:00 UTC every Sunday) or cron(30 1 15 * ? *) (01:30 UTC on the 15th)"
HORIZON_DAYS = 366 * 8


class CronError(ValueError):
    """What is wrong with an expression, in words."""


@dataclass(frozen=True)
class Cron:
    text: str
    minute: int
    hour: int
    dom: int | None  # None: `?`
    months: frozenset[int]
    dow: str | None  # None: `?`; else "N", "L", "NL" or "N#K" with N in 1..7
    year: int | None  # None: `*`

    def _day_matches(self, d: dt.date) -> bool:
        if d.month not in self.months or (self.year is not None and d.year != self.year):
            return False
        if self.dom is not None:
            return d.day == self.dom
        aws = (d.weekday() + 1) % 7 + 1  # Monday (0) -> 2, Sunday (6) -> 1
        last = calendar.monthrange(d.year, d.month)[1]
        w = self.dow or ""
        if w == "L":
            return aws == 7
        if w.endswith("L"):
            return aws == int(w[0]) and d.day + 7 > last
        if "#" in w:
            n, k = (int(x) for x in w.split("#"))
            return aws == n and (d.day - 1) // 7 + 1 == k
        return aws == int(w)

    def next_after(self, t: float) -> float | None:
        """The first firing strictly after epoch second `t`, or None within HORIZON_DAYS (a past year)."""
        start = dt.datetime.fromtimestamp(t, dt.timezone.utc)
        day = start.date()
        for _ in range(HORIZON_DAYS):
            if self._day_matches(day):
                at = dt.datetime(day.year, day.month, day.day, self.hour, self.minute, tzinfo=dt.timezone.utc)
                if at.timestamp() > t:
                    return at.timestamp()
            day += dt.timedelta(days=1)
        return None


def parse(text: str) -> Cron:
    """The schedule, or CronError saying what is wrong (and what HyperPod takes)."""
    if not isinstance(text, str) or not text.strip():
        raise CronError(f"an empty schedule; HyperPod takes {EXAMPLE}")
    s = text.strip()
    if s.startswith("rate("):
        raise CronError(f"'{s}': HyperPod takes cron() expressions only, not rate(); e.g. {EXAMPLE}")
    if not (s.startswith("cron(") and s.endswith(")")):
        raise CronError(f"'{s}' is not cron(Minutes Hours Day-of-month Month Day-of-week Year); e.g. {EXAMPLE}")
    fields = s[5:-1].split(" ")
    if len(fields) != 6:
        raise CronError(f"'{s}' has {len(fields)} field(s), cron() takes 6 separated by one space: Minutes Hours "
                        f"Day-of-month Month Day-of-week Year; e.g. {EXAMPLE}")
    minute, hour, dom, month, dow, year = fields
    if not minute or not hour:
        raise CronError(f"'{s}': give the minute and the hour (one value each, UTC)")
    if not PATTERN.fullmatch(s):
        raise CronError(f"'{s}' is not a schedule HyperPod accepts: one minute (0-59) and one hour (0-23), a "
                        "day of the month (1-31) or of the week (SUN-SAT or 1-7, L, 1L-7L, 1#1-7#5) with ? in the "
                        f"other, a month (1-12, * or */N), a year (2020-2099 or *); e.g. {EXAMPLE}")
    if (dom == "?") == (dow == "?"):
        raise CronError(f"'{s}': give either a day of the month or a day of the week, and ? in the other field")
    step = 1
    if month in ("", "*"):
        months = frozenset(range(1, 13))
    elif month.startswith("*/"):
        step = int(month[2:])
        months = frozenset(range(1, 13, step))
    else:
        months = frozenset({int(month)})
    if dow in DAYS:
        dow = str(DAYS.index(dow) + 1)
    return Cron(text=s, minute=int(minute), hour=int(hour), dom=None if dom == "?" else int(dom), months=months,
                dow=None if dow == "?" else dow, year=None if year in ("", "*") else int(year))
