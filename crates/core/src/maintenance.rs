//! Maintenance windows: when the engine may start restarts. A window is a set of weekdays, a
//! wall-clock span and a time zone (`Mon-Fri 22:00-06:00 Europe/Oslo`); a span that ends at
//! or before it starts runs past midnight into the next day, and belongs to the day it starts.
//! Pure: the time comes in as an argument, so openings are tested across DST changes.
//!
//! Wall-clock times that do not exist (the hour skipped when clocks go forward) are read as
//! the moment after the gap, and times that exist twice (clocks going back) as the first: a
//! window `02:00-03:00` in a zone that skips 02:00-03:00 does not open that day.

use std::fmt;
use std::str::FromStr;

use jiff::civil::{Date, Time as WallTime};
use jiff::tz::TimeZone;
use k8s_openapi::jiff::Timestamp;

/// Why a window did not parse.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum WindowError {
    #[error("empty maintenance window")]
    Empty,
    #[error("`{text}` is not a day or a range of days (Mon, Sat-Sun, Mon,Wed,Fri)")]
    Days { text: String },
    #[error("`{text}` is not a span of wall-clock times (HH:MM-HH:MM, e.g. 22:00-06:00)")]
    Span { text: String },
    #[error("the window `{text}` opens and closes at the same time")]
    EmptySpan { text: String },
    #[error("`{name}` is not a time zone of the tz database: {reason}")]
    Zone { name: String, reason: String },
    #[error("`{text}` after the time zone: a window is [DAYS] HH:MM-HH:MM [ZONE]")]
    Trailing { text: String },
}

/// One window: `[DAYS] HH:MM-HH:MM [ZONE]`, days every day and the zone UTC when left out.
#[derive(Clone)]
pub struct MaintenanceWindow {
    /// Bit `n` set: open on the day `n` days after Monday.
    days: u8,
    /// Minutes after midnight; `end` may be 1440 (`24:00`).
    start: u16,
    end: u16,
    zone: TimeZone,
    text: String,
}

impl fmt::Debug for MaintenanceWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MaintenanceWindow({})", self.text)
    }
}

impl fmt::Display for MaintenanceWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl PartialEq for MaintenanceWindow {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for MaintenanceWindow {}

const DAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

fn day(text: &str) -> Option<u8> {
    let lower = text.to_ascii_lowercase();
    const FULL: [&str; 7] = [
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
    ];
    (0..7u8).find(|&n| lower == DAYS[n as usize] || lower == FULL[n as usize])
}

fn days(text: &str) -> Result<u8, WindowError> {
    let bad = || WindowError::Days {
        text: text.to_owned(),
    };
    let mut set = 0u8;
    for item in text.split(',') {
        match item.split_once('-') {
            Some((from, to)) => {
                let (from, to) = (day(from).ok_or_else(bad)?, day(to).ok_or_else(bad)?);
                // Fri-Mon wraps over the weekend.
                let mut n = from;
                loop {
                    set |= 1 << n;
                    if n == to {
                        break;
                    }
                    n = (n + 1) % 7;
                }
            }
            None => set |= 1 << day(item).ok_or_else(bad)?,
        }
    }
    Ok(set)
}

fn minutes(text: &str, end: bool) -> Option<u16> {
    let (hours, minutes) = text.split_once(':')?;
    if hours.is_empty() || hours.len() > 2 || minutes.len() != 2 {
        return None;
    }
    let (hours, minutes): (u16, u16) = (hours.parse().ok()?, minutes.parse().ok()?);
    match (hours, minutes) {
        (24, 0) if end => Some(1440),
        (0..=23, 0..=59) => Some(hours * 60 + minutes),
        _ => None,
    }
}

impl FromStr for MaintenanceWindow {
    type Err = WindowError;

    fn from_str(text: &str) -> Result<Self, WindowError> {
        let mut words = text.split_whitespace().peekable();
        let first = words.peek().ok_or(WindowError::Empty)?;
        let days = if first.starts_with(|c: char| c.is_ascii_digit()) {
            0x7f
        } else {
            days(words.next().unwrap_or_default())?
        };
        let span = words.next().ok_or_else(|| WindowError::Span {
            text: text.trim().to_owned(),
        })?;
        let bad_span = || WindowError::Span {
            text: span.to_owned(),
        };
        let (start, end) = span.split_once('-').ok_or_else(bad_span)?;
        let (start, end) = (
            minutes(start, false).ok_or_else(bad_span)?,
            minutes(end, true).ok_or_else(bad_span)?,
        );
        if start == end {
            return Err(WindowError::EmptySpan {
                text: span.to_owned(),
            });
        }
        let zone = match words.next() {
            None => TimeZone::UTC,
            Some(name) => TimeZone::get(name).map_err(|err| WindowError::Zone {
                name: name.to_owned(),
                reason: err.to_string(),
            })?,
        };
        let rest: Vec<&str> = words.collect();
        if !rest.is_empty() {
            return Err(WindowError::Trailing {
                text: rest.join(" "),
            });
        }
        Ok(Self {
            days,
            start,
            end,
            zone,
            text: text.split_whitespace().collect::<Vec<_>>().join(" "),
        })
    }
}

impl MaintenanceWindow {
    /// The instant a wall-clock minute of `date` is in this window's zone.
    fn instant(&self, date: Date, minute: u16) -> Option<Timestamp> {
        let (date, minute) = if minute == 1440 {
            (date.tomorrow().ok()?, 0)
        } else {
            (date, minute)
        };
        let time = WallTime::new((minute / 60) as i8, (minute % 60) as i8, 0, 0).ok()?;
        self.zone
            .to_ambiguous_timestamp(date.to_datetime(time))
            .compatible()
            .ok()
    }

    /// The span the window opened on `date` covers, if it opens that day.
    fn span_on(&self, date: Date) -> Option<(Timestamp, Timestamp)> {
        let weekday = date.weekday().to_monday_zero_offset();
        if self.days & (1 << weekday) == 0 {
            return None;
        }
        let open = self.instant(date, self.start)?;
        let close = if self.end > self.start {
            self.instant(date, self.end)?
        } else {
            self.instant(date.tomorrow().ok()?, self.end)?
        };
        (open < close).then_some((open, close))
    }

    fn local_date(&self, now: Timestamp) -> Date {
        now.to_zoned(self.zone.clone()).date()
    }

    /// When the window closes, if it is open at `now`.
    fn open_until(&self, now: Timestamp) -> Option<Timestamp> {
        let today = self.local_date(now);
        // A span is at most a day long: it opened yesterday or today.
        [today.yesterday().ok(), Some(today)]
            .into_iter()
            .flatten()
            .filter_map(|d| self.span_on(d))
            .find(|(open, close)| *open <= now && now < *close)
            .map(|(_, close)| close)
    }

    /// The first opening after `now`, within the next eight days.
    fn next_opening(&self, now: Timestamp) -> Option<Timestamp> {
        let mut date = self.local_date(now);
        for _ in 0..9 {
            if let Some((open, _)) = self.span_on(date).filter(|(open, _)| *open > now) {
                return Some(open);
            }
            date = date.tomorrow().ok()?;
        }
        None
    }
}

/// Whether restarts may start now, and when that changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowState {
    /// No windows: restarts may start at any time.
    Always,
    Open {
        closes: Timestamp,
    },
    Closed {
        opens: Option<Timestamp>,
    },
}

/// The windows in force: `--maintenance-window` (repeatable), or a workload's
/// `NS/maintenance-window` (`;`-separated, or `always`), which replaces them for that workload.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MaintenanceWindows(Vec<MaintenanceWindow>);

impl MaintenanceWindows {
    pub fn new(windows: Vec<MaintenanceWindow>) -> Self {
        Self(windows)
    }

    /// An annotation's value: windows separated by `;`, or `always` for no restriction.
    pub fn parse_list(text: &str) -> Result<Self, WindowError> {
        if text.trim().eq_ignore_ascii_case("always") {
            return Ok(Self::default());
        }
        text.split(';')
            .filter(|w| !w.trim().is_empty())
            .map(str::parse)
            .collect::<Result<Vec<_>, _>>()
            .and_then(|windows| {
                if windows.is_empty() {
                    Err(WindowError::Empty)
                } else {
                    Ok(Self(windows))
                }
            })
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn state(&self, now: Timestamp) -> WindowState {
        if self.0.is_empty() {
            return WindowState::Always;
        }
        if let Some(closes) = self.0.iter().filter_map(|w| w.open_until(now)).max() {
            return WindowState::Open { closes };
        }
        WindowState::Closed {
            opens: self.0.iter().filter_map(|w| w.next_opening(now)).min(),
        }
    }

    /// As written, `;`-separated.
    pub fn text(&self) -> String {
        if self.0.is_empty() {
            return "always".to_owned();
        }
        self.0
            .iter()
            .map(|w| w.text.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    }
}

impl WindowState {
    pub fn is_open(&self) -> bool {
        !matches!(self, WindowState::Closed { .. })
    }

    /// When it changes, if it does by time alone.
    pub fn changes_at(&self) -> Option<Timestamp> {
        match self {
            WindowState::Always => None,
            WindowState::Open { closes } => Some(*closes),
            WindowState::Closed { opens } => *opens,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn windows(text: &str) -> MaintenanceWindows {
        MaintenanceWindows::parse_list(text).unwrap()
    }

    #[test]
    fn grammar_accepts_days_spans_and_zones_and_names_what_is_wrong() {
        for good in [
            "Sat-Sun 00:00-04:00",
            "Mon-Fri 22:00-06:00 Europe/Oslo",
            "mon,wed,FRI 01:30-02:00",
            "Fri-Mon 00:00-24:00",
            "22:00-06:00",
            "Saturday 00:00-04:00 UTC",
        ] {
            assert!(good.parse::<MaintenanceWindow>().is_ok(), "{good}");
        }
        let cases = [
            ("", WindowError::Empty),
            (
                "Mon-Frx 22:00-06:00",
                WindowError::Days {
                    text: "Mon-Frx".into(),
                },
            ),
            (
                "Mon 25:00-06:00",
                WindowError::Span {
                    text: "25:00-06:00".into(),
                },
            ),
            (
                "Mon 22:00",
                WindowError::Span {
                    text: "22:00".into(),
                },
            ),
            (
                "Mon 24:00-01:00",
                WindowError::Span {
                    text: "24:00-01:00".into(),
                },
            ),
            (
                "Mon 04:00-04:00",
                WindowError::EmptySpan {
                    text: "04:00-04:00".into(),
                },
            ),
            (
                "Mon 00:00-04:00 UTC extra",
                WindowError::Trailing {
                    text: "extra".into(),
                },
            ),
        ];
        for (text, error) in cases {
            assert_eq!(
                text.parse::<MaintenanceWindow>().unwrap_err(),
                error,
                "{text}"
            );
        }
        let zone = "Mon 00:00-04:00 Mars/Olympus"
            .parse::<MaintenanceWindow>()
            .unwrap_err();
        assert!(
            zone.to_string()
                .starts_with("`Mars/Olympus` is not a time zone"),
            "{zone}"
        );
    }

    #[test]
    fn weekend_window_in_utc_opens_closes_and_names_the_next_opening() {
        let w = windows("Sat-Sun 00:00-04:00");
        // 2026-11-20 is a Friday.
        let cases = [
            (
                "2026-11-20T23:00:00Z",
                WindowState::Closed {
                    opens: Some(at("2026-11-21T00:00:00Z")),
                },
            ),
            (
                "2026-11-21T00:00:00Z",
                WindowState::Open {
                    closes: at("2026-11-21T04:00:00Z"),
                },
            ),
            (
                "2026-11-21T04:00:00Z",
                WindowState::Closed {
                    opens: Some(at("2026-11-22T00:00:00Z")),
                },
            ),
            (
                "2026-11-22T03:59:59Z",
                WindowState::Open {
                    closes: at("2026-11-22T04:00:00Z"),
                },
            ),
            (
                "2026-11-22T05:00:00Z",
                WindowState::Closed {
                    opens: Some(at("2026-11-28T00:00:00Z")),
                },
            ),
        ];
        for (now, state) in cases {
            assert_eq!(w.state(at(now)), state, "{now}");
        }
    }

    #[test]
    fn overnight_window_belongs_to_the_day_it_opens() {
        let w = windows("Mon-Fri 22:00-06:00");
        // Saturday 05:00 is still Friday's window; Sunday 05:00 is in no window.
        assert_eq!(
            w.state(at("2026-11-21T05:00:00Z")),
            WindowState::Open {
                closes: at("2026-11-21T06:00:00Z")
            }
        );
        assert_eq!(
            w.state(at("2026-11-22T05:00:00Z")),
            WindowState::Closed {
                opens: Some(at("2026-11-23T22:00:00Z"))
            }
        );
    }

    #[test]
    fn a_zone_moves_the_window_with_its_daylight_saving_time() {
        let w = windows("Sun 01:00-04:00 Europe/Oslo");
        // Winter (UTC+1): 2026-11-22 is a Sunday.
        assert_eq!(
            w.state(at("2026-11-22T00:30:00Z")),
            WindowState::Open {
                closes: at("2026-11-22T03:00:00Z")
            }
        );
        // Summer (UTC+2): 2026-06-21 is a Sunday; 01:00 Oslo is 23:00 UTC the day before.
        assert_eq!(
            w.state(at("2026-06-20T22:59:00Z")),
            WindowState::Closed {
                opens: Some(at("2026-06-20T23:00:00Z"))
            }
        );
        // Clocks go forward at 02:00 on 2026-03-29: 01:00-04:00 lasts two hours.
        assert_eq!(
            w.state(at("2026-03-29T00:00:00Z")),
            WindowState::Open {
                closes: at("2026-03-29T02:00:00Z")
            }
        );
        // Clocks go back at 03:00 on 2026-10-25: 01:00-04:00 lasts four hours.
        assert_eq!(
            w.state(at("2026-10-25T02:30:00Z")),
            WindowState::Open {
                closes: at("2026-10-25T03:00:00Z")
            }
        );
        assert_eq!(
            windows("Sun 01:00-04:00 Europe/Oslo").state(at("2026-10-24T23:00:00Z")),
            WindowState::Open {
                closes: at("2026-10-25T03:00:00Z")
            }
        );
    }

    #[test]
    fn a_window_inside_the_skipped_hour_does_not_open_that_day() {
        let w = windows("Sun 02:00-03:00 Europe/Oslo");
        // 2026-03-29: 02:00-03:00 does not exist; the next opening is a week later, in summer.
        assert_eq!(
            w.state(at("2026-03-28T23:00:00Z")),
            WindowState::Closed {
                opens: Some(at("2026-04-05T00:00:00Z"))
            }
        );
    }

    #[test]
    fn several_windows_and_always() {
        let w = windows("Sat 00:00-01:00; Mon 12:00-13:00 ");
        assert_eq!(
            w.state(at("2026-11-21T02:00:00Z")),
            WindowState::Closed {
                opens: Some(at("2026-11-23T12:00:00Z"))
            }
        );
        assert_eq!(w.text(), "Sat 00:00-01:00; Mon 12:00-13:00");
        assert_eq!(
            windows("always").state(at("2026-11-21T02:00:00Z")),
            WindowState::Always
        );
        assert_eq!(
            MaintenanceWindows::parse_list(" ; "),
            Err(WindowError::Empty)
        );
    }
}
