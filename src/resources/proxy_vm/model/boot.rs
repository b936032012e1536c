//! `startup` between its Terraform object and PVE's property string (`pve::wire::Startup`).

use pve::wire::Startup;
use tfplugin::Value;

use super::super::attr::startup::{DOWN, ORDER, UP};

/// The configured start order; `None` when unset, unknown, or setting no part.
pub fn startup_of(value: &Value) -> Option<Startup> {
    if value.is_null() || !value.is_wholly_known() {
        return None;
    }
    let part = |name: &str| {
        value
            .get_attr(name)
            .as_i64()
            .and_then(|n| u32::try_from(n).ok())
    };
    let startup = Startup {
        order: part(ORDER),
        up: part(UP),
        down: part(DOWN),
    };
    (!startup.is_empty()).then_some(startup)
}

/// The state's `startup`: null when the VM has no start order.
pub fn startup_value(startup: Option<&Startup>) -> Value {
    let Some(startup) = startup.filter(|s| !s.is_empty()) else {
        return Value::Null;
    };
    let part = |n: Option<u32>| n.map_or(Value::Null, |n| Value::number(i64::from(n)));
    Value::object([
        (ORDER, part(startup.order)),
        (UP, part(startup.up)),
        (DOWN, part(startup.down)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn startup_round_trips_and_empty_is_none() {
        let startup = Startup {
            order: Some(2),
            up: None,
            down: Some(30),
        };
        assert_eq!(startup_of(&startup_value(Some(&startup))), Some(startup));
        assert_eq!(startup_value(Some(&Startup::default())), Value::Null);
        assert_eq!(startup_of(&Value::Null), None);
        let empty = Value::object([(ORDER, Value::Null), (UP, Value::Null), (DOWN, Value::Null)]);
        assert_eq!(startup_of(&empty), None);
    }
}
