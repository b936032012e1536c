//! `schema::route` and `schema::validate` on real-looking requests, pinning PVE's texts
//! (pve-common `JSONSchema.pm` check_prop/check_type/check_object, facts.md §1-2, §6).

use std::collections::BTreeMap;

use pvesim::schema::{self, Route, RouteError};
use serde_json::{Map, Value, json};

fn form(pairs: &[(&str, &str)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
        .collect()
}

fn route(method: &str, path: &str) -> Route {
    schema::route(method, path).unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

fn errors(method: &str, path: &str, params: Map<String, Value>) -> BTreeMap<String, String> {
    schema::validate(&route(method, path), &params).expect_err("request should be rejected")
}

fn ok(method: &str, path: &str, params: Map<String, Value>) -> Map<String, Value> {
    schema::validate(&route(method, path), &params).unwrap_or_else(|e| panic!("rejected: {e:?}"))
}

#[test]
fn routes_fill_path_params_and_volume_takes_the_rest() {
    let r = route("POST", "/nodes/pve1/qemu/9000/clone");
    assert_eq!(r.template, "/nodes/{node}/qemu/{vmid}/clone");
    assert_eq!(r.path_params["node"], "pve1");
    assert_eq!(r.path_params["vmid"], "9000");
    let r = route(
        "DELETE",
        "/nodes/pve1/storage/proxy-seeds/content/proxy-seeds:iso/edge-0.iso",
    );
    assert_eq!(r.path_params["volume"], "proxy-seeds:iso/edge-0.iso");
    let r = route(
        "GET",
        "/nodes/pve1/storage/local/content/local%3Aiso%2Fa.iso",
    );
    assert_eq!(r.path_params["volume"], "local:iso/a.iso");
    let r = route(
        "GET",
        "/nodes/pve1/tasks/UPID:pve1:000D6BDA:041E0A54:654A5A1D:qmclone:9000:t@pve!p:/status",
    );
    assert_eq!(
        r.path_params["upid"],
        "UPID:pve1:000D6BDA:041E0A54:654A5A1D:qmclone:9000:t@pve!p:"
    );
}

#[test]
fn unknown_paths_and_methods_are_501() {
    assert_eq!(
        schema::route("GET", "/nodes/pve1/lxc"),
        Err(RouteError::NotImplemented)
    );
    assert_eq!(
        schema::route("PATCH", "/version"),
        Err(RouteError::NotImplemented)
    );
    assert_eq!(
        schema::route("POST", "/version"),
        Err(RouteError::NotImplemented)
    );
    assert_eq!(
        schema::not_implemented_message("GET", "/foo"),
        "Method 'GET /foo' not implemented"
    );
}

#[test]
fn good_clone_is_normalised() {
    let params = ok(
        "POST",
        "/nodes/pve1/qemu/9000/clone",
        form(&[
            ("newid", "4242"),
            ("name", "edge-0"),
            ("full", "1"),
            ("target", "pve2"),
            ("description", "x"),
        ]),
    );
    assert_eq!(params["newid"], json!(4242));
    assert_eq!(params["vmid"], json!(9000));
    assert_eq!(params["node"], json!("pve1"));
    assert_eq!(params["full"], json!(true));
    assert_eq!(params["name"], json!("edge-0"));
}

#[test]
fn good_config_update_with_property_strings() {
    let params = ok(
        "POST",
        "/nodes/pve1/qemu/4242/config",
        form(&[
            ("cores", "2"),
            ("memory", "2048"),
            ("agent", "1"),
            ("ide2", "proxy-seeds:iso/edge-0.iso,media=cdrom"),
            (
                "net0",
                "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0,tag=4,firewall=on",
            ),
            (
                "scsi0",
                "local-lvm:vm-4242-disk-0,size=20G,discard=on,ssd=1",
            ),
            ("tags", "proxy;edge"),
            ("ipconfig0", "ip=dhcp,ip6=auto"),
            ("boot", "order=scsi0;ide2;net0"),
            ("delete", "net1,serial0"),
            ("digest", "0123456789abcdef0123456789abcdef01234567"),
            ("onboot", "0"),
        ]),
    );
    assert_eq!(params["cores"], json!(2));
    assert_eq!(params["onboot"], json!(false));
    assert_eq!(params["memory"], json!("2048"));
    assert_eq!(
        params["net0"],
        json!("virtio=BC:24:11:AA:BB:CC,bridge=vmbr0,tag=4,firewall=on")
    );
}

#[test]
fn json_bodies_take_json_types() {
    let mut body = Map::new();
    body.insert("cores".into(), json!(4));
    body.insert("onboot".into(), json!(true));
    body.insert("name".into(), json!("edge-1"));
    body.insert("description".into(), Value::Null);
    body.insert("sockets".into(), json!(2.0));
    body.insert("cpulimit".into(), json!(1.5));
    let params = ok("PUT", "/nodes/pve1/qemu/4242/config", body);
    assert_eq!(params["cores"], json!(4));
    assert_eq!(
        params["sockets"],
        json!(2),
        "Perl prints the float 2.0 as 2"
    );
    assert_eq!(params["cpulimit"], json!(1.5));
    assert_eq!(params["onboot"], json!(true));
    assert!(
        !params.contains_key("description"),
        "JSON null counts as absent"
    );

    let mut body = Map::new();
    body.insert("cores".into(), json!(true));
    body.insert("name".into(), json!(["a"]));
    let e = errors("PUT", "/nodes/pve1/qemu/4242/config", body);
    assert_eq!(
        e["cores"],
        "type check ('integer') failed - got JSON::PP::Boolean"
    );
    assert_eq!(e["name"], "type check ('string') failed - got ARRAY");
}

#[test]
fn unknown_parameter_is_rejected() {
    let e = errors(
        "POST",
        "/nodes/pve1/qemu/4242/config",
        form(&[("cores", "2"), ("colour", "red"), ("net32", "virtio")]),
    );
    let text =
        "property is not defined in schema and the schema does not allow additional properties";
    assert_eq!(e["colour"], text);
    assert_eq!(e["net32"], text, "net[n] goes up to net31");
    assert_eq!(e.len(), 2);
}

#[test]
fn missing_required_parameter() {
    let e = errors(
        "POST",
        "/nodes/pve1/qemu/9000/clone",
        form(&[("name", "edge-0")]),
    );
    assert_eq!(e["newid"], "property is missing and it is not optional");
    let e = errors(
        "PUT",
        "/nodes/pve1/qemu/4242/resize",
        form(&[("disk", "scsi0")]),
    );
    assert_eq!(e["size"], "property is missing and it is not optional");
}

#[test]
fn booleans_are_0_or_1_in_forms() {
    let e = errors(
        "DELETE",
        "/nodes/pve1/qemu/4242",
        form(&[("purge", "true"), ("destroy-unreferenced-disks", "yes")]),
    );
    assert_eq!(e["purge"], "type check ('boolean') failed - got 'true'");
    assert_eq!(
        e["destroy-unreferenced-disks"],
        "type check ('boolean') failed - got 'yes'"
    );
    let params = ok(
        "DELETE",
        "/nodes/pve1/qemu/4242",
        form(&[("purge", "1"), ("destroy-unreferenced-disks", "0")]),
    );
    assert_eq!(params["purge"], json!(true));
    assert_eq!(params["destroy-unreferenced-disks"], json!(false));
}

#[test]
fn bad_types_patterns_enums_and_ranges() {
    let e = errors(
        "POST",
        "/nodes/pve1/qemu/4242/config",
        form(&[
            ("cores", "two"),
            ("sockets", "0"),
            ("cpulimit", "129"),
            ("ostype", "win12"),
            ("serial0", "tty"),
            ("description", &"d".repeat(8193)),
            ("background_delay", "31"),
        ]),
    );
    assert_eq!(e["cores"], "type check ('integer') failed - got 'two'");
    assert_eq!(e["sockets"], "value must have a minimum value of 1");
    assert_eq!(e["cpulimit"], "value must have a maximum value of 128");
    assert_eq!(
        e["ostype"],
        "value 'win12' does not have a value in the enumeration 'other, wxp, w2k, w2k3, w2k8, \
            wvista, win7, win8, win10, win11, l24, l26, solaris'"
    );
    assert_eq!(e["serial0"], "value does not match the regex pattern");
    assert_eq!(e["description"], "value may only be 8192 characters long");
    assert_eq!(
        e["background_delay"],
        "value must have a maximum value of 30"
    );

    let e = errors(
        "PUT",
        "/nodes/pve1/qemu/4242/resize",
        form(&[("disk", "scsi31"), ("size", "20GB")]),
    );
    assert!(
        e["disk"]
            .starts_with("value 'scsi31' does not have a value in the enumeration 'ide0, ide1,")
    );
    assert_eq!(e["size"], "value does not match the regex pattern");
    ok(
        "PUT",
        "/nodes/pve1/qemu/4242/resize",
        form(&[("disk", "scsi0"), ("size", "+2G")]),
    );
}

#[test]
fn formats_report_invalid_format_with_the_validator_text() {
    let e = errors(
        "POST",
        "/nodes/pve1/qemu/9000/clone",
        form(&[("newid", "99"), ("name", "edge_0"), ("pool", "a b")]),
    );
    assert_eq!(
        e["newid"],
        "invalid format - value does not look like a valid VM ID\n"
    );
    assert_eq!(
        e["name"],
        "invalid format - value does not look like a valid DNS name\n"
    );
    assert_eq!(
        e["pool"],
        "invalid format - pool name 'a b' contains invalid characters\n"
    );

    let e = errors("GET", "/nodes/pve_1/qemu/abc/config", Map::new());
    assert_eq!(
        e["node"],
        "invalid format - value does not look like a valid node name\n"
    );
    assert_eq!(e["vmid"], "type check ('integer') failed - got 'abc'");

    let e = errors(
        "PUT",
        "/nodes/pve1/qemu/4242/config",
        form(&[("tags", "proxy;bad!tag"), ("delete", "net0,9x")]),
    );
    assert_eq!(e["tags"], "invalid format - invalid characters in tag\n");
    assert_eq!(
        e["delete"],
        "invalid format - invalid configuration ID '9x'\n"
    );
}

#[test]
fn property_string_errors_name_the_inner_key() {
    let e = errors(
        "POST",
        "/nodes/pve1/qemu/4242/config",
        form(&[
            ("net0", "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0,tag=4095"),
            ("net1", "virtio,colour=red"),
            ("net2", "model=virtio,macaddr=01:00:00:00:00:01"),
            ("net3", "bridge=vmbr0"),
            ("scsi0", "local-lvm:vm-1-disk-0,size=lots"),
            ("agent", "enabled=maybe"),
        ]),
    );
    assert_eq!(
        e["net0"],
        "invalid format - format error\nnet0.tag: value must have a maximum value of 4094\n"
    );
    assert_eq!(
        e["net1"],
        "invalid format - invalid key in comma-separated list property: colour\n"
    );
    assert_eq!(
        e["net2"],
        "invalid format - format error\nnet2.macaddr: invalid format - value does not look like a \
            valid unicast MAC address\n\n"
    );
    assert_eq!(
        e["net3"],
        "invalid format - format error\nnet3.model: property is missing and it is not optional\n"
    );
    assert_eq!(
        e["scsi0"],
        "invalid format - format error\nscsi0.size: invalid format - value does not look like a \
            valid disk size: lots\n\n"
    );
    assert_eq!(
        e["agent"],
        "invalid format - format error\nagent.enabled: type check ('boolean') failed - got \
            'maybe'\n"
    );
}

#[test]
fn requires_names_the_missing_partner() {
    let e = errors(
        "POST",
        "/nodes/pve1/qemu/4242/config",
        form(&[("force", "1")]),
    );
    assert_eq!(
        e["delete"],
        "missing property - 'force' requires this property"
    );
}

#[test]
fn uri_and_body_must_agree() {
    let e = errors(
        "POST",
        "/nodes/pve1/qemu/4242/config",
        form(&[("vmid", "4243")]),
    );
    assert_eq!(
        e["vmid"],
        "duplicate parameter (already defined in URI) with conflicting values!"
    );
    ok(
        "POST",
        "/nodes/pve1/qemu/4242/config",
        form(&[("vmid", "4242"), ("cores", "1")]),
    );
}

#[test]
fn upload_fields() {
    let e = errors(
        "POST",
        "/nodes/pve1/storage/proxy-seeds/upload",
        form(&[("content", "snippets"), ("filename", "seed.iso")]),
    );
    assert_eq!(
        e["content"],
        "value 'snippets' does not have a value in the enumeration 'iso, vztmpl, import'"
    );
    ok(
        "POST",
        "/nodes/pve1/storage/proxy-seeds/upload",
        form(&[
            ("content", "iso"),
            ("filename", "seed.iso"),
            ("checksum", "ab"),
            ("checksum-algorithm", "sha256"),
        ]),
    );
    let e = errors(
        "POST",
        "/nodes/pve1/storage/proxy-seeds/upload",
        form(&[
            ("content", "iso"),
            ("filename", "seed.iso"),
            ("checksum", "ab"),
        ]),
    );
    assert_eq!(
        e["checksum-algorithm"],
        "missing property - 'checksum' requires this property"
    );
}

#[test]
fn random_values_never_panic() {
    // Pieces that steer the property-string parser and the format validators into corners.
    const PIECES: &[&str] = &[
        ",",
        "=",
        ";",
        ":",
        " ",
        "\n",
        "\0",
        ".",
        "-",
        "+",
        "/",
        "0",
        "1",
        "4095",
        "virtio",
        "bridge",
        "tag",
        "model",
        "macaddr",
        "BC:24:11:AA:BB:CC",
        "file",
        "volume",
        "media",
        "cdrom",
        "size",
        "20G",
        "local:iso/a.iso",
        "dhcp",
        "ip",
        "10.0.0.1/24",
        "é",
        "order",
        "legacy",
        "true",
        "on",
        "e5",
        "99999999999999999999",
    ];
    let endpoint = schema::endpoint("POST", "/nodes/{node}/qemu/{vmid}/config").expect("served");
    let keys: Vec<String> = endpoint
        .params
        .iter()
        .map(|rule| rule.name.replace("[n]", "0"))
        .collect();
    let route = route("POST", "/nodes/pve1/qemu/4242/config");
    let mut rng = fastrand::Rng::with_seed(7);
    for _ in 0..5000 {
        let key = &keys[rng.usize(..keys.len())];
        let value: String = (0..rng.usize(0..12))
            .map(|_| PIECES[rng.usize(..PIECES.len())])
            .collect();
        let mut params = Map::new();
        params.insert(key.clone(), Value::String(value.clone()));
        let first = schema::validate(&route, &params);
        assert_eq!(
            first,
            schema::validate(&route, &params),
            "deterministic for {key}={value:?}"
        );
        if let Err(errors) = first {
            assert!(
                errors
                    .keys()
                    .all(|k| k == key || k.starts_with("_") || k == "delete"),
                "{errors:?}"
            );
        }
    }
}
