//! Our cron expressions (`steadfast::core::cron`) against the `croner` crate on generated expressions and
//! times: the same previous (inclusive) and next (exclusive) occurrence, or both refusing the expression.
//! `STEADFAST_CASES=<n>` sets the number of cases (default 20,000); `STEADFAST_SEED=<seed>` replays one with its
//! expression and times printed.

mod common;

use chrono::{DateTime, Utc};
use croner::parser::{CronParser, Seconds, Year};
use steadfast::core::cron::Cron;
use steadfast::runtime::{Rng, SplitMix64};

const MONTHS: [&str; 12] = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"];
const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

fn item(rng: &SplitMix64, min: u32, max: u32, names: &[&str]) -> String {
    let pick = |n: u32| (rng.next_u64() % u64::from(n)) as u32;
    let v = |rng_pick: u32| -> String {
        if !names.is_empty() && pick(3) == 0 {
            let i = (rng_pick - min) as usize % names.len();
            let n = names[i];
            if pick(2) == 0 {
                n.to_ascii_lowercase()
            } else {
                n.to_string()
            }
        } else {
            rng_pick.to_string()
        }
    };
    let span = max - min + 1;
    // Now and then a field that must be refused: out of range, backwards, a zero step. (An empty list item, as
    // in `0,`, croner takes and we refuse: not generated.)
    match pick(60) {
        0 => return (max + 1).to_string(),
        1 => return format!("{}-{}", min + 1, min),
        2 => return "*/0".into(),
        _ => {}
    }
    match pick(6) {
        0 => "*".into(),
        1 => format!("*/{}", 1 + pick(span.min(12))),
        2 => v(min + pick(span)),
        3 => {
            let a = min + pick(span);
            let b = a + pick(max - a + 1);
            format!("{}-{}", v(a), v(b))
        }
        4 => {
            let a = min + pick(span);
            let b = a + pick(max - a + 1);
            format!("{}-{}/{}", a, b, 1 + pick(span.min(10)))
        }
        _ => (0..2 + pick(3)).map(|_| (min + pick(span)).to_string()).collect::<Vec<_>>().join(","),
    }
}

fn expression(rng: &SplitMix64) -> String {
    let pick = |n: u64| rng.next_u64() % n;
    if pick(20) == 0 {
        return ["@hourly", "@daily", "@weekly", "@monthly", "@yearly", "@midnight", "@annually"][pick(7) as usize]
            .into();
    }
    // Mostly restrictive fields, so occurrences are sparse and the searches go far.
    let minute = if pick(3) == 0 { item(rng, 0, 59, &[]) } else { pick(60).to_string() };
    let hour = if pick(2) == 0 { item(rng, 0, 23, &[]) } else { pick(24).to_string() };
    let day = if pick(2) == 0 { "*".to_string() } else { item(rng, 1, 31, &[]) };
    let month = if pick(2) == 0 { "*".to_string() } else { item(rng, 1, 12, &MONTHS) };
    let weekday = if pick(2) == 0 { "*".to_string() } else { item(rng, 0, 6, &DAYS) };
    format!("{minute} {hour} {day} {month} {weekday}")
}

fn ms(t: DateTime<Utc>) -> u64 {
    t.timestamp_millis() as u64
}

#[test]
fn our_cron_agrees_with_croner_on_generated_expressions_and_times() {
    let parser = CronParser::builder().seconds(Seconds::Disallowed).year(Year::Disallowed).dom_and_dow(false).build();
    let only = common::seeds::only_seed();
    let seeds = common::seeds::seeds(0..20_000);
    let cases = seeds.len() as u64;
    let mut compared = 0;
    for seed in seeds {
        let rng = SplitMix64::new(seed);
        let expr = expression(&rng);
        // 1971..2100, minute-aligned or not.
        let at = 31_536_000_000 + rng.next_u64() % 4_000_000_000_000;
        let repro = format!("expression {expr:?} at {at}; repro: {}", common::seeds::repro(seed, ""));
        let ours = Cron::parse(&expr);
        // Croner knows some nicknames only with seconds: it is given their five fields.
        let expanded = match expr.as_str() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            e => e,
        };
        let theirs = parser.parse(expanded);
        assert_eq!(ours.is_ok(), theirs.is_ok(), "{repro}: ours {ours:?}, croner {:?}", theirs.as_ref().err());
        let (Ok(ours), Ok(theirs)) = (ours, theirs) else { continue };
        let t = DateTime::from_timestamp_millis(at as i64).unwrap();
        let prev = theirs.find_previous_occurrence(&t, true).ok().map(ms);
        let next = theirs.find_next_occurrence(&t, false).ok().map(ms);
        if only.is_some() {
            println!("{repro}: previous {prev:?} next {next:?}");
        }
        // Croner searches further than nine years; an expression that rare does not exist with five fields
        // except February 29th, which recurs within eight.
        assert_eq!(ours.previous(at), prev, "previous: {repro}");
        assert_eq!(ours.next(at), next, "next: {repro}");
        compared += 1;
    }
    if only.is_none() {
        println!("cron expressions compared with croner: {compared} of {cases}");
        assert!(compared * 10 > cases * 7, "most generated expressions parse: {compared}");
        assert!(compared < cases, "some generated expressions are refused by both");
    }
}
