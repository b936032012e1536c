//! The parameter rules of every endpoint pve-sim serves, written from the facts of PVE's
//! API schema (pve-docs `apidata.js`, PVE 9.1) and the Perl sources that define formats.
//! `tests/schema_conformance.rs` checks them against the official dump when present.

use std::sync::OnceLock;

use super::ParamType::{Boolean, Integer, Number, String as Str};
use super::{EndpointRules, Format, ParamRule, ParamType};

mod ha;

const fn p(name: &'static str, ty: ParamType) -> ParamRule {
    ParamRule::new(name, ty)
}

impl ParamRule {
    const fn opt(mut self) -> Self {
        self.optional = true;
        self
    }
    const fn fmt(mut self, name: &'static str) -> Self {
        self.format = Some(Format::Named(name));
        self
    }
    const fn keys(mut self, keys: &'static [ParamRule]) -> Self {
        self.format = Some(Format::Keys(keys));
        self
    }
    const fn min(mut self, v: f64) -> Self {
        self.minimum = Some(v);
        self
    }
    const fn max(mut self, v: f64) -> Self {
        self.maximum = Some(v);
        self
    }
    const fn max_len(mut self, v: usize) -> Self {
        self.max_length = Some(v);
        self
    }
    const fn pattern(mut self, perl: &'static str) -> Self {
        self.pattern = Some(perl);
        self
    }
    const fn one_of(mut self, values: &'static [&'static str]) -> Self {
        self.enumeration = Some(values);
        self
    }
    const fn default(mut self, v: &'static str) -> Self {
        self.default = Some(v);
        self
    }
    const fn requires(mut self, other: &'static str) -> Self {
        self.requires = Some(other);
        self
    }
    /// `name` must end in `[n]`; indexes `0..count`.
    const fn indexed(mut self, count: u32) -> Self {
        self.index_count = count;
        self
    }
    const fn default_key(mut self) -> Self {
        self.default_key = true;
        self
    }
}

/// A property-string key that is another name for `target`.
const fn alias(name: &'static str, target: &'static str) -> ParamRule {
    let mut rule = p(name, Str);
    rule.alias = Some(target);
    rule.optional = true;
    rule
}

/// A NIC model key: `virtio=MAC` sets `model=virtio` and `macaddr=MAC`.
const fn nic_model(name: &'static str) -> ParamRule {
    let mut rule = alias(name, "macaddr");
    rule.key_alias = Some("model");
    rule
}

// ---- shared parameters -------------------------------------------------------------

const NODE: ParamRule = p("node", Str).fmt("pve-node");
const VMID: ParamRule = p("vmid", Integer)
    .fmt("pve-vmid")
    .min(100.0)
    .max(999_999_999.0);
const VMID_OPT: ParamRule = VMID.opt();
const STORAGE: ParamRule = p("storage", Str).fmt("pve-storage-id");
const SKIPLOCK: ParamRule = p("skiplock", Boolean).opt();
const UPID: ParamRule = p("upid", Str);
const POOLID: ParamRule = p("poolid", Str).fmt("pve-poolid");
const VOLUME: ParamRule = p("volume", Str);
const CHECKSUM_ALGORITHMS: &[&str] = &["md5", "sha1", "sha224", "sha256", "sha384", "sha512"];
const UPLOAD_CONTENT: &[&str] = &["iso", "vztmpl", "import"];
const DRIVE_NAMES: &[&str] = &[
    "ide0",
    "ide1",
    "ide2",
    "ide3",
    "scsi0",
    "scsi1",
    "scsi2",
    "scsi3",
    "scsi4",
    "scsi5",
    "scsi6",
    "scsi7",
    "scsi8",
    "scsi9",
    "scsi10",
    "scsi11",
    "scsi12",
    "scsi13",
    "scsi14",
    "scsi15",
    "scsi16",
    "scsi17",
    "scsi18",
    "scsi19",
    "scsi20",
    "scsi21",
    "scsi22",
    "scsi23",
    "scsi24",
    "scsi25",
    "scsi26",
    "scsi27",
    "scsi28",
    "scsi29",
    "scsi30",
    "virtio0",
    "virtio1",
    "virtio2",
    "virtio3",
    "virtio4",
    "virtio5",
    "virtio6",
    "virtio7",
    "virtio8",
    "virtio9",
    "virtio10",
    "virtio11",
    "virtio12",
    "virtio13",
    "virtio14",
    "virtio15",
    "sata0",
    "sata1",
    "sata2",
    "sata3",
    "sata4",
    "sata5",
    "efidisk0",
    "tpmstate0",
];
/// qemu-server's pattern for a list of CPU/host-node ids (`0-3;7`).
const ID_RANGES: &str = "(?^:\\d+(?:-\\d+)?(?:;\\d+(?:-\\d+)?)*)";

// ---- qemu property-string formats ----------------------------------------------------

const DRIVE_FORMATS: &[&str] = &["raw", "qcow", "qed", "qcow2", "vmdk", "cloop"];
const WWN: &str = "(?^:^(0x)[0-9a-fA-F]{16})";

/// Keys every drive bus has (qemu-server `QemuServer/Drive.pm`: `%drivedesc_base`,
/// `%iothread_fmt` aside, throttling, `%rerror_fmt`, `%werror_fmt`, import).
macro_rules! drive_keys {
    ($($extra:expr),* $(,)?) => {
        &[
            p("file", Str).fmt("pve-volume-id-or-qm-path").default_key(),
            alias("volume", "file"),
            p("media", Str).opt().one_of(&["cdrom", "disk"]).default("disk"),
            p("format", Str).opt().one_of(DRIVE_FORMATS),
            p("size", Str).opt().fmt("disk-size"),
            p("import-from", Str).opt().fmt("pve-volume-id-or-absolute-path"),
            p("cache", Str).opt().one_of(&[
                "none",
                "writethrough",
                "writeback",
                "unsafe",
                "directsync",
            ]),
            p("aio", Str).opt().one_of(&["native", "threads", "io_uring"]),
            p("discard", Str).opt().one_of(&["ignore", "on"]),
            p("detect_zeroes", Boolean).opt(),
            p("backup", Boolean).opt(),
            p("replicate", Boolean).opt().default("1"),
            p("shared", Boolean).opt().default("0"),
            p("snapshot", Boolean).opt(),
            p("serial", Str).opt().fmt("urlencoded").max_len(60),
            p("rerror", Str).opt().one_of(&["ignore", "report", "stop"]),
            p("werror", Str).opt().one_of(&["enospc", "ignore", "report", "stop"]),
            p("bps", Integer).opt(),
            p("bps_rd", Integer).opt(),
            p("bps_wr", Integer).opt(),
            p("bps_max_length", Integer).opt().min(1.0),
            p("bps_rd_max_length", Integer).opt().min(1.0),
            p("bps_wr_max_length", Integer).opt().min(1.0),
            alias("bps_rd_length", "bps_rd_max_length"),
            alias("bps_wr_length", "bps_wr_max_length"),
            p("iops", Integer).opt(),
            p("iops_rd", Integer).opt(),
            p("iops_wr", Integer).opt(),
            p("iops_max", Integer).opt(),
            p("iops_rd_max", Integer).opt(),
            p("iops_wr_max", Integer).opt(),
            p("iops_max_length", Integer).opt().min(1.0),
            p("iops_rd_max_length", Integer).opt().min(1.0),
            p("iops_wr_max_length", Integer).opt().min(1.0),
            alias("iops_rd_length", "iops_rd_max_length"),
            alias("iops_wr_length", "iops_wr_max_length"),
            p("mbps", Number).opt(),
            p("mbps_rd", Number).opt(),
            p("mbps_wr", Number).opt(),
            p("mbps_max", Number).opt(),
            p("mbps_rd_max", Number).opt(),
            p("mbps_wr_max", Number).opt(),
            $($extra),*
        ]
    };
}

pub(crate) const IDE_KEYS: &[ParamRule] = drive_keys![
    p("model", Str).opt().fmt("urlencoded").max_len(120),
    p("ssd", Boolean).opt(),
    p("wwn", Str).opt().pattern(WWN),
];
const SATA_KEYS: &[ParamRule] =
    drive_keys![p("ssd", Boolean).opt(), p("wwn", Str).opt().pattern(WWN),];
const SCSI_KEYS: &[ParamRule] = drive_keys![
    p("iothread", Boolean).opt(),
    p("queues", Integer).opt().min(2.0),
    p("ro", Boolean).opt(),
    p("scsiblock", Boolean).opt().default("0"),
    p("ssd", Boolean).opt(),
    p("product", Str).opt().pattern("[A-Za-z0-9\\-_\\s]{,16}"),
    p("vendor", Str).opt().pattern("[A-Za-z0-9\\-_\\s]{,8}"),
    p("wwn", Str).opt().pattern(WWN),
];
const VIRTIO_KEYS: &[ParamRule] =
    drive_keys![p("iothread", Boolean).opt(), p("ro", Boolean).opt(),];

/// The NIC models of `netX` (`model=` or the model as the first key), which the world
/// reads `netX` values with too.
pub(crate) const NIC_MODELS: &[&str] = &[
    "e1000",
    "e1000-82540em",
    "e1000-82544gc",
    "e1000-82545em",
    "e1000e",
    "i82551",
    "i82557b",
    "i82559er",
    "ne2k_isa",
    "ne2k_pci",
    "pcnet",
    "rtl8139",
    "virtio",
    "vmxnet3",
];
/// qemu-server `QemuServer/Network.pm` `$net_fmt`.
const NET_KEYS: &[ParamRule] = &[
    p("model", Str).one_of(NIC_MODELS).default_key(),
    p("macaddr", Str).opt().fmt("mac-addr"),
    p("bridge", Str).opt().fmt("pve-bridge-id"),
    p("tag", Integer).opt().min(1.0).max(4094.0),
    p("trunks", Str).opt().pattern(ID_RANGES),
    p("firewall", Boolean).opt(),
    p("link_down", Boolean).opt(),
    p("mtu", Integer).opt().min(1.0).max(65520.0),
    p("queues", Integer).opt().min(0.0).max(64.0),
    p("rate", Number).opt().min(0.0),
    nic_model("e1000"),
    nic_model("e1000-82540em"),
    nic_model("e1000-82544gc"),
    nic_model("e1000-82545em"),
    nic_model("e1000e"),
    nic_model("i82551"),
    nic_model("i82557b"),
    nic_model("i82559er"),
    nic_model("ne2k_isa"),
    nic_model("ne2k_pci"),
    nic_model("pcnet"),
    nic_model("rtl8139"),
    nic_model("virtio"),
    nic_model("vmxnet3"),
];

const AGENT_KEYS: &[ParamRule] = &[
    p("enabled", Boolean).default_key().default("0"),
    p("freeze-fs", Boolean).opt().default("1"),
    alias("freeze-fs-on-backup", "freeze-fs"),
    alias("guest-fsfreeze", "freeze-fs"),
    p("fstrim_cloned_disks", Boolean).opt().default("0"),
    p("type", Str)
        .opt()
        .one_of(&["virtio", "isa"])
        .default("virtio"),
];
const MEMORY_KEYS: &[ParamRule] = &[p("current", Integer).min(16.0).default_key().default("512")];
const AUDIO_KEYS: &[ParamRule] = &[
    p("device", Str).one_of(&["ich9-intel-hda", "intel-hda", "AC97"]),
    p("driver", Str)
        .opt()
        .one_of(&["spice", "none"])
        .default("spice"),
];
const EFIDISK_KEYS: &[ParamRule] = &[
    p("file", Str).fmt("pve-volume-id-or-qm-path").default_key(),
    alias("volume", "file"),
    p("efitype", Str).opt().one_of(&["2m", "4m"]).default("2m"),
    p("format", Str).opt().one_of(DRIVE_FORMATS),
    p("import-from", Str)
        .opt()
        .fmt("pve-volume-id-or-absolute-path"),
    p("ms-cert", Str)
        .opt()
        .one_of(&["2011", "2023", "2023w", "2023k"])
        .default("2011"),
    p("pre-enrolled-keys", Boolean).opt().default("0"),
    p("size", Str).opt().fmt("disk-size"),
];
const TPMSTATE_KEYS: &[ParamRule] = &[
    p("file", Str).fmt("pve-volume-id-or-qm-path").default_key(),
    alias("volume", "file"),
    p("format", Str).opt().one_of(&["raw", "qcow2", "vmdk"]),
    p("import-from", Str)
        .opt()
        .fmt("pve-volume-id-or-absolute-path"),
    p("size", Str).opt().fmt("disk-size"),
    p("version", Str)
        .opt()
        .one_of(&["v1.2", "v2.0"])
        .default("v1.2"),
];
const UNUSED_KEYS: &[ParamRule] = &[
    p("file", Str).fmt("pve-volume-id").default_key(),
    alias("volume", "file"),
];
const IVSHMEM_KEYS: &[ParamRule] = &[
    p("size", Integer).min(1.0),
    p("name", Str).opt().pattern("[a-zA-Z0-9\\-]+"),
];
const MACHINE_KEYS: &[ParamRule] = &[
    p("type", Str)
        .opt()
        .default_key()
        .max_len(40)
        .pattern(concat!(
            "(pc|pc(-i440fx)?-\\d+(\\.\\d+)+(\\+pve\\d+)?(\\.pxe)?",
            "|q35|pc-q35-\\d+(\\.\\d+)+(\\+pve\\d+)?(\\.pxe)?",
            "|virt(?:-\\d+(\\.\\d+)+)?(\\+pve\\d+)?)",
        )),
    p("aw-bits", Number).opt().min(32.0).max(64.0),
    p("enable-s3", Boolean).opt(),
    p("enable-s4", Boolean).opt(),
    p("viommu", Str).opt().one_of(&["intel", "virtio"]),
];
const NUMA_KEYS: &[ParamRule] = &[
    p("cpus", Str).pattern(ID_RANGES),
    p("hostnodes", Str).opt().pattern(ID_RANGES),
    p("memory", Number).opt(),
    p("policy", Str)
        .opt()
        .one_of(&["preferred", "bind", "interleave"]),
];
const SPICE_KEYS: &[ParamRule] = &[
    p("foldersharing", Boolean).opt().default("0"),
    p("videostreaming", Str)
        .opt()
        .one_of(&["off", "all", "filter"])
        .default("off"),
];
const USB_KEYS: &[ParamRule] = &[
    p("host", Str).opt().default_key().pattern(concat!(
        "(?^:(?:(?:(?^:(0x)?([0-9A-Fa-f]{4}):(0x)?([0-9A-Fa-f]{4})))",
        "|(?:(?^:(\\d+)\\-(\\d+(\\.\\d+)*)))|[Ss][Pp][Ii][Cc][Ee]))",
    )),
    p("mapping", Str).opt().fmt("pve-configid"),
    p("usb3", Boolean).opt().default("0"),
];
const VGA_KEYS: &[ParamRule] = &[
    p("type", Str)
        .opt()
        .default_key()
        .one_of(&[
            "cirrus",
            "qxl",
            "qxl2",
            "qxl3",
            "qxl4",
            "none",
            "serial0",
            "serial1",
            "serial2",
            "serial3",
            "std",
            "virtio",
            "virtio-gl",
            "vmware",
        ])
        .default("std"),
    p("clipboard", Str).opt().one_of(&["vnc"]),
    p("memory", Integer).opt().min(4.0).max(512.0),
];
const VIRTIOFS_KEYS: &[ParamRule] = &[
    p("dirid", Str).fmt("pve-configid").default_key(),
    p("cache", Str)
        .opt()
        .one_of(&["auto", "always", "metadata", "never"])
        .default("auto"),
    p("direct-io", Boolean).opt().default("0"),
    p("expose-acl", Boolean).opt().default("0"),
    p("expose-xattr", Boolean).opt().default("0"),
];

// Formats PVE registers by name; the schema names them only, so their keys come from
// qemu-server's format definitions as summarised by the schema's typetext.

/// qemu-server `$ipconfig_fmt`.
pub(crate) const IPCONFIG_KEYS: &[ParamRule] = &[
    p("ip", Str).opt().fmt("pve-ipv4-config"),
    p("gw", Str).opt().fmt("ipv4"),
    p("ip6", Str).opt().fmt("pve-ipv6-config"),
    p("gw6", Str).opt().fmt("ipv6"),
];
/// qemu-server `$cicustom_fmt`.
pub(crate) const CICUSTOM_KEYS: &[ParamRule] = &[
    p("meta", Str).opt().fmt("pve-volume-id"),
    p("network", Str).opt().fmt("pve-volume-id"),
    p("user", Str).opt().fmt("pve-volume-id"),
    p("vendor", Str).opt().fmt("pve-volume-id"),
];
/// qemu-server `$boot_fmt`.
pub(crate) const BOOT_KEYS: &[ParamRule] = &[
    p("legacy", Str).opt().default_key().pattern("[acdn]{1,4}"),
    p("order", Str).opt().fmt("pve-qm-bootdev-list"),
];
/// qemu-server `$watchdog_fmt`.
pub(crate) const WATCHDOG_KEYS: &[ParamRule] = &[
    p("model", Str)
        .opt()
        .default_key()
        .one_of(&["i6300esb", "ib700"]),
    p("action", Str)
        .opt()
        .one_of(&["reset", "shutdown", "poweroff", "pause", "debug", "none"]),
];
/// qemu-server `$rng_fmt`.
pub(crate) const RNG_KEYS: &[ParamRule] = &[
    p("source", Str)
        .default_key()
        .one_of(&["/dev/urandom", "/dev/random", "/dev/hwrng"]),
    p("max_bytes", Integer).opt(),
    p("period", Integer).opt(),
];
/// qemu-server `$smbios1_fmt` (value patterns not modelled).
pub(crate) const SMBIOS1_KEYS: &[ParamRule] = &[
    p("base64", Boolean).opt(),
    p("family", Str).opt(),
    p("manufacturer", Str).opt(),
    p("product", Str).opt(),
    p("serial", Str).opt(),
    p("sku", Str).opt(),
    p("uuid", Str).opt(),
    p("version", Str).opt(),
];
/// qemu-server `QemuServer/CPUConfig.pm` `$cpu_fmt` (value checks not modelled).
pub(crate) const CPU_KEYS: &[ParamRule] = &[
    p("cputype", Str).opt().default_key(),
    p("flags", Str).opt(),
    p("guest-phys-bits", Integer).opt(),
    p("hidden", Boolean).opt(),
    p("hv-vendor-id", Str).opt(),
    p("phys-bits", Str).opt(),
    p("reported-model", Str).opt(),
];
/// qemu-server `QemuServer/PCI.pm` `$hostpci_fmt` (value checks not modelled).
pub(crate) const HOSTPCI_KEYS: &[ParamRule] = &[
    p("host", Str).opt().default_key(),
    p("device-id", Str).opt(),
    p("driver", Str).opt().one_of(&["vfio", "keep"]),
    p("legacy-igd", Boolean).opt(),
    p("mapping", Str).opt(),
    p("mdev", Str).opt(),
    p("pcie", Boolean).opt(),
    p("rombar", Boolean).opt(),
    p("romfile", Str).opt(),
    p("sub-device-id", Str).opt(),
    p("sub-vendor-id", Str).opt(),
    p("vendor-id", Str).opt(),
    p("x-vga", Boolean).opt(),
];
/// qemu-server `$sev_fmt` (type values not modelled).
pub(crate) const SEV_KEYS: &[ParamRule] = &[
    p("type", Str).default_key(),
    p("allow-smt", Boolean).opt(),
    p("kernel-hashes", Boolean).opt(),
    p("no-debug", Boolean).opt(),
    p("no-key-sharing", Boolean).opt(),
];
/// qemu-server `$tdx_fmt` (type values not modelled).
pub(crate) const TDX_KEYS: &[ParamRule] = &[
    p("type", Str).default_key(),
    p("attestation", Boolean),
    p("vsock-cid", Integer).opt(),
    p("vsock-port", Integer).opt(),
];

// ---- qemu VM options -------------------------------------------------------------------

const KEYBOARDS: &[&str] = &[
    "de", "de-ch", "da", "en-gb", "en-us", "es", "fi", "fr", "fr-be", "fr-ca", "fr-ch", "hu", "is",
    "it", "ja", "lt", "mk", "nl", "no", "pl", "pt", "pt-br", "sv", "sl", "tr",
];
const OSTYPES: &[&str] = &[
    "other", "wxp", "w2k", "w2k3", "w2k8", "wvista", "win7", "win8", "win10", "win11", "l24",
    "l26", "solaris",
];
const LOCKS: &[&str] = &[
    "backup",
    "clone",
    "create",
    "migrate",
    "rollback",
    "snapshot",
    "snapshot-delete",
    "suspending",
    "suspended",
];
const SCSI_CONTROLLERS: &[&str] = &[
    "lsi",
    "lsi53c810",
    "virtio-scsi-pci",
    "virtio-scsi-single",
    "megasas",
    "pvscsi",
];

/// The VM options shared by create (`POST /nodes/{node}/qemu`) and both config updates
/// (qemu-server `QemuServer.pm` `$confdesc` plus cloud-init and drive options).
const VM_OPTIONS: &[ParamRule] = &[
    p("acpi", Boolean).opt().default("1"),
    p("affinity", Str).opt().fmt("pve-cpuset"),
    p("agent", Str).opt().keys(AGENT_KEYS),
    p("allow-ksm", Boolean).opt().default("1"),
    p("amd-sev", Str).opt().fmt("pve-qemu-sev-fmt"),
    p("arch", Str).opt().one_of(&["x86_64", "aarch64"]),
    p("args", Str).opt(),
    p("audio0", Str).opt().keys(AUDIO_KEYS),
    p("autostart", Boolean).opt().default("0"),
    p("balloon", Integer).opt().min(0.0),
    p("bios", Str)
        .opt()
        .one_of(&["seabios", "ovmf"])
        .default("seabios"),
    p("boot", Str).opt().fmt("pve-qm-boot"),
    p("bootdisk", Str)
        .opt()
        .fmt("pve-qm-bootdisk")
        .pattern("(ide|sata|scsi|virtio)\\d+"),
    p("cdrom", Str).opt().fmt("pve-qm-ide"),
    p("cicustom", Str).opt().fmt("pve-qm-cicustom"),
    p("cipassword", Str).opt(),
    p("citype", Str)
        .opt()
        .one_of(&["configdrive2", "nocloud", "opennebula"]),
    p("ciupgrade", Boolean).opt().default("1"),
    p("ciuser", Str).opt(),
    p("cores", Integer).opt().min(1.0).default("1"),
    p("cpu", Str).opt().fmt("pve-vm-cpu-conf"),
    p("cpulimit", Number).opt().min(0.0).max(128.0).default("0"),
    p("cpuunits", Integer).opt().min(1.0).max(262_144.0),
    p("description", Str).opt().max_len(8192),
    p("efidisk0", Str).opt().keys(EFIDISK_KEYS),
    p("freeze", Boolean).opt(),
    p("hookscript", Str).opt().fmt("pve-volume-id"),
    p("hostpci[n]", Str).opt().fmt("pve-qm-hostpci").indexed(16),
    p("hotplug", Str)
        .opt()
        .fmt("pve-hotplug-features")
        .default("network,disk,usb"),
    p("hugepages", Str).opt().one_of(&["any", "2", "1024"]),
    p("ide[n]", Str).opt().keys(IDE_KEYS).indexed(4),
    p("intel-tdx", Str).opt().fmt("pve-qemu-tdx-fmt"),
    p("ipconfig[n]", Str)
        .opt()
        .fmt("pve-qm-ipconfig")
        .indexed(32),
    p("ivshmem", Str).opt().keys(IVSHMEM_KEYS),
    p("keephugepages", Boolean).opt().default("0"),
    p("keyboard", Str).opt().one_of(KEYBOARDS),
    p("kvm", Boolean).opt().default("1"),
    p("localtime", Boolean).opt(),
    p("lock", Str).opt().one_of(LOCKS),
    p("machine", Str).opt().keys(MACHINE_KEYS),
    p("memory", Str).opt().keys(MEMORY_KEYS),
    p("migrate_downtime", Number).opt().min(0.0).default("0.1"),
    p("migrate_speed", Integer).opt().min(0.0).default("0"),
    p("name", Str).opt().fmt("dns-name"),
    p("nameserver", Str).opt().fmt("address-list"),
    p("net[n]", Str).opt().keys(NET_KEYS).indexed(32),
    p("numa", Boolean).opt().default("0"),
    p("numa[n]", Str).opt().keys(NUMA_KEYS).indexed(8),
    p("onboot", Boolean).opt().default("0"),
    p("ostype", Str).opt().one_of(OSTYPES).default("other"),
    p("parallel[n]", Str)
        .opt()
        .pattern("/dev/parport\\d+|/dev/usb/lp\\d+")
        .indexed(3),
    p("protection", Boolean).opt().default("0"),
    p("reboot", Boolean).opt().default("1"),
    p("rng0", Str).opt().fmt("pve-qm-rng"),
    p("sata[n]", Str).opt().keys(SATA_KEYS).indexed(6),
    p("scsi[n]", Str).opt().keys(SCSI_KEYS).indexed(31),
    p("scsihw", Str)
        .opt()
        .one_of(SCSI_CONTROLLERS)
        .default("lsi"),
    p("searchdomain", Str).opt(),
    p("serial[n]", Str)
        .opt()
        .pattern("(/dev/.+|socket)")
        .indexed(4),
    p("shares", Integer)
        .opt()
        .min(0.0)
        .max(50_000.0)
        .default("1000"),
    p("smbios1", Str).opt().fmt("pve-qm-smbios1").max_len(512),
    p("smp", Integer).opt().min(1.0).default("1"),
    p("sockets", Integer).opt().min(1.0).default("1"),
    p("spice_enhancements", Str).opt().keys(SPICE_KEYS),
    p("sshkeys", Str).opt().fmt("urlencoded"),
    p("startdate", Str)
        .opt()
        .pattern("(now|\\d{4}-\\d{1,2}-\\d{1,2}(T\\d{1,2}:\\d{1,2}:\\d{1,2})?)")
        .default("now"),
    p("startup", Str).opt().fmt("pve-startup-order"),
    p("tablet", Boolean).opt().default("1"),
    p("tags", Str).opt().fmt("pve-tag-list"),
    p("tdf", Boolean).opt().default("0"),
    p("template", Boolean).opt().default("0"),
    p("tpmstate0", Str).opt().keys(TPMSTATE_KEYS),
    p("unused[n]", Str).opt().keys(UNUSED_KEYS).indexed(256),
    p("usb[n]", Str).opt().keys(USB_KEYS).indexed(14),
    p("vcpus", Integer).opt().min(1.0).default("0"),
    p("vga", Str).opt().keys(VGA_KEYS),
    p("virtio[n]", Str).opt().keys(VIRTIO_KEYS).indexed(16),
    p("virtiofs[n]", Str).opt().keys(VIRTIOFS_KEYS).indexed(10),
    p("vmgenid", Str)
        .opt()
        .pattern("(?:[a-fA-F0-9]{8}(?:-[a-fA-F0-9]{4}){3}-[a-fA-F0-9]{12}|[01])"),
    p("vmstatestorage", Str).opt().fmt("pve-storage-id"),
    p("watchdog", Str).opt().fmt("pve-qm-watchdog"),
];

/// Create and the asynchronous config update may import disks; PUT may not.
const IMPORT_WORKING_STORAGE: ParamRule =
    p("import-working-storage", Str).opt().fmt("pve-storage-id");

/// Options of `POST /nodes/{node}/qemu` beyond the VM options.
const CREATE_OPTIONS: &[ParamRule] = &[
    NODE,
    VMID,
    p("archive", Str).opt().max_len(255),
    p("bwlimit", Integer).opt().min(0.0),
    p("force", Boolean).opt().requires("archive"),
    p("ha-managed", Boolean).opt().default("0"),
    IMPORT_WORKING_STORAGE,
    p("live-restore", Boolean).opt(),
    p("pool", Str).opt().fmt("pve-poolid"),
    p("start", Boolean).opt().default("0"),
    STORAGE.opt(),
    p("unique", Boolean).opt().requires("archive"),
];

/// Options of `PUT .../config` beyond the VM options; `POST .../config` adds `background_delay`.
const UPDATE_OPTIONS: &[ParamRule] = &[
    NODE,
    VMID,
    p("delete", Str).opt().fmt("pve-configid-list"),
    p("digest", Str).opt().max_len(40),
    p("force", Boolean).opt().requires("delete"),
    p("revert", Str).opt().fmt("pve-configid-list"),
    SKIPLOCK,
];

/// The commands `POST .../agent` accepts, which its index (`GET .../agent`) also lists
/// (qemu-server `API2/Qemu/Agent.pm`).
pub(crate) const AGENT_COMMANDS: &[&str] = &[
    "fsfreeze-freeze",
    "fsfreeze-status",
    "fsfreeze-thaw",
    "fstrim",
    "get-fsinfo",
    "get-host-name",
    "get-memory-block-info",
    "get-memory-blocks",
    "get-osinfo",
    "get-time",
    "get-timezone",
    "get-users",
    "get-vcpus",
    "info",
    "network-get-interfaces",
    "ping",
    "shutdown",
    "suspend-disk",
    "suspend-hybrid",
    "suspend-ram",
];

fn ep(method: &'static str, template: &'static str, groups: &[&[ParamRule]]) -> EndpointRules {
    EndpointRules {
        method,
        template,
        params: groups.concat(),
    }
}

pub(crate) fn all() -> &'static [EndpointRules] {
    static ALL: OnceLock<Vec<EndpointRules>> = OnceLock::new();
    ALL.get_or_init(build)
}

// Path parameters most endpoints share, and the power options several of them take.
const VM_PATH: &[ParamRule] = &[NODE, VMID];
const TASK_PATH: &[ParamRule] = &[NODE, UPID];
const STORAGE_ON_NODE: &[ParamRule] = &[NODE, STORAGE];
const VOLUME_ON_NODE: &[ParamRule] = &[NODE, STORAGE.opt(), VOLUME];
const TIMEOUT: ParamRule = p("timeout", Integer).opt().min(0.0);
const KEEP_ACTIVE: ParamRule = p("keepActive", Boolean).opt().default("0");
const MIGRATEDFROM: ParamRule = p("migratedfrom", Str).opt().fmt("pve-node");

/// Every endpoint, in the order `schema::route` tries them.
fn build() -> Vec<EndpointRules> {
    [
        node_and_cluster_endpoints(),
        vm_endpoints(),
        vm_power_endpoints(),
        agent_endpoints(),
        storage_endpoints(),
        task_endpoints(),
        access_pool_and_storage_endpoints(),
        migrate_endpoints(),
        ha::ha_endpoints(),
    ]
    .concat()
}

/// Nodes and the cluster-wide views.
fn node_and_cluster_endpoints() -> Vec<EndpointRules> {
    vec![
        ep("GET", "/version", &[]),
        ep("GET", "/nodes", &[]),
        ep("GET", "/nodes/{node}/status", &[&[NODE]]),
        ep("GET", "/nodes/{node}/version", &[&[NODE]]),
        ep(
            "GET",
            "/nodes/{node}/network",
            &[&[
                NODE,
                p("type", Str).opt().one_of(&[
                    "bridge",
                    "bond",
                    "eth",
                    "alias",
                    "vlan",
                    "fabric",
                    "OVSBridge",
                    "OVSBond",
                    "OVSPort",
                    "OVSIntPort",
                    "vnet",
                    "any_bridge",
                    "any_local_bridge",
                    "include_sdn",
                ]),
            ]],
        ),
        ep(
            "GET",
            "/cluster/resources",
            &[&[p("type", Str)
                .opt()
                .one_of(&["vm", "storage", "node", "sdn"])]],
        ),
        ep("GET", "/cluster/nextid", &[&[VMID_OPT]]),
        ep("GET", "/cluster/status", &[]),
    ]
}

/// VMs: create, clone, config, resize, template, destroy.
fn vm_endpoints() -> Vec<EndpointRules> {
    vec![
        ep(
            "GET",
            "/nodes/{node}/qemu",
            &[&[NODE, p("full", Boolean).opt()]],
        ),
        ep("POST", "/nodes/{node}/qemu", &[CREATE_OPTIONS, VM_OPTIONS]),
        ep("GET", "/nodes/{node}/qemu/{vmid}", &[VM_PATH]),
        ep(
            "DELETE",
            "/nodes/{node}/qemu/{vmid}",
            &[
                VM_PATH,
                &[
                    p("destroy-unreferenced-disks", Boolean).opt().default("0"),
                    p("purge", Boolean).opt(),
                    SKIPLOCK,
                ],
            ],
        ),
        ep(
            "POST",
            "/nodes/{node}/qemu/{vmid}/clone",
            &[
                VM_PATH,
                &[
                    p("bwlimit", Integer).opt().min(0.0),
                    p("description", Str).opt(),
                    p("format", Str).opt().one_of(&["raw", "qcow2", "vmdk"]),
                    p("full", Boolean).opt(),
                    p("name", Str).opt().fmt("dns-name"),
                    p("newid", Integer)
                        .fmt("pve-vmid")
                        .min(100.0)
                        .max(999_999_999.0),
                    p("pool", Str).opt().fmt("pve-poolid"),
                    p("snapname", Str).opt().fmt("pve-configid").max_len(40),
                    STORAGE.opt(),
                    p("target", Str).opt().fmt("pve-node"),
                ],
            ],
        ),
        ep(
            "GET",
            "/nodes/{node}/qemu/{vmid}/config",
            &[
                VM_PATH,
                &[
                    p("current", Boolean).opt().default("0"),
                    p("snapshot", Str).opt().fmt("pve-configid").max_len(40),
                ],
            ],
        ),
        ep(
            "POST",
            "/nodes/{node}/qemu/{vmid}/config",
            &[
                UPDATE_OPTIONS,
                VM_OPTIONS,
                &[
                    p("background_delay", Integer).opt().min(1.0).max(30.0),
                    IMPORT_WORKING_STORAGE,
                ],
            ],
        ),
        ep(
            "PUT",
            "/nodes/{node}/qemu/{vmid}/config",
            &[UPDATE_OPTIONS, VM_OPTIONS],
        ),
        ep("GET", "/nodes/{node}/qemu/{vmid}/pending", &[VM_PATH]),
        ep(
            "PUT",
            "/nodes/{node}/qemu/{vmid}/resize",
            &[
                VM_PATH,
                &[
                    p("digest", Str).opt().max_len(40),
                    p("disk", Str).one_of(DRIVE_NAMES),
                    p("size", Str).pattern("\\+?\\d+(\\.\\d+)?[KMGT]?"),
                    SKIPLOCK,
                ],
            ],
        ),
        ep(
            "POST",
            "/nodes/{node}/qemu/{vmid}/template",
            &[VM_PATH, &[p("disk", Str).opt().one_of(DRIVE_NAMES)]],
        ),
    ]
}

/// VM power state: status, start, stop, shutdown, reboot, reset, suspend, resume.
fn vm_power_endpoints() -> Vec<EndpointRules> {
    vec![
        ep("GET", "/nodes/{node}/qemu/{vmid}/status", &[VM_PATH]),
        ep(
            "GET",
            "/nodes/{node}/qemu/{vmid}/status/current",
            &[VM_PATH],
        ),
        ep(
            "POST",
            "/nodes/{node}/qemu/{vmid}/status/start",
            &[
                VM_PATH,
                &[
                    p("force-cpu", Str).opt(),
                    p("machine", Str).opt().keys(MACHINE_KEYS),
                    MIGRATEDFROM,
                    p("migration_network", Str).opt().fmt("CIDR"),
                    p("migration_type", Str)
                        .opt()
                        .one_of(&["secure", "insecure"]),
                    p("nets-host-mtu", Str)
                        .opt()
                        .pattern("net\\d+=\\d+(,net\\d+=\\d+)*"),
                    SKIPLOCK,
                    p("stateuri", Str).opt().max_len(128),
                    p("targetstorage", Str).opt().fmt("storage-pair-list"),
                    TIMEOUT,
                    p("with-conntrack-state", Boolean).opt().default("0"),
                ],
            ],
        ),
        ep(
            "POST",
            "/nodes/{node}/qemu/{vmid}/status/stop",
            &[
                VM_PATH,
                &[
                    KEEP_ACTIVE,
                    MIGRATEDFROM,
                    p("overrule-shutdown", Boolean).opt().default("0"),
                    SKIPLOCK,
                    TIMEOUT,
                ],
            ],
        ),
        ep(
            "POST",
            "/nodes/{node}/qemu/{vmid}/status/shutdown",
            &[
                VM_PATH,
                &[
                    p("forceStop", Boolean).opt().default("0"),
                    KEEP_ACTIVE,
                    SKIPLOCK,
                    TIMEOUT,
                ],
            ],
        ),
        ep(
            "POST",
            "/nodes/{node}/qemu/{vmid}/status/reboot",
            &[VM_PATH, &[TIMEOUT]],
        ),
        ep(
            "POST",
            "/nodes/{node}/qemu/{vmid}/status/reset",
            &[VM_PATH, &[SKIPLOCK]],
        ),
        ep(
            "POST",
            "/nodes/{node}/qemu/{vmid}/status/suspend",
            &[
                VM_PATH,
                &[
                    SKIPLOCK,
                    p("statestorage", Str)
                        .opt()
                        .fmt("pve-storage-id")
                        .requires("todisk"),
                    p("todisk", Boolean).opt().default("0"),
                ],
            ],
        ),
        ep(
            "POST",
            "/nodes/{node}/qemu/{vmid}/status/resume",
            &[VM_PATH, &[p("nocheck", Boolean).opt(), SKIPLOCK]],
        ),
    ]
}

/// The guest agent.
fn agent_endpoints() -> Vec<EndpointRules> {
    vec![
        ep("GET", "/nodes/{node}/qemu/{vmid}/agent", &[VM_PATH]),
        ep(
            "POST",
            "/nodes/{node}/qemu/{vmid}/agent",
            &[VM_PATH, &[p("command", Str).one_of(AGENT_COMMANDS)]],
        ),
        ep(
            "GET",
            "/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces",
            &[VM_PATH],
        ),
        ep("POST", "/nodes/{node}/qemu/{vmid}/agent/ping", &[VM_PATH]),
        ep("GET", "/nodes/{node}/qemu/{vmid}/agent/info", &[VM_PATH]),
        ep(
            "GET",
            "/nodes/{node}/qemu/{vmid}/agent/get-osinfo",
            &[VM_PATH],
        ),
        ep(
            "GET",
            "/nodes/{node}/qemu/{vmid}/agent/get-host-name",
            &[VM_PATH],
        ),
        ep(
            "GET",
            "/nodes/{node}/qemu/{vmid}/agent/file-read",
            &[
                VM_PATH,
                &[
                    p("count", Integer)
                        .opt()
                        .min(1.0)
                        .max(16_777_216.0)
                        .default("16777216"),
                    p("decode", Boolean).opt().default("1"),
                    p("file", Str),
                    p("offset", Integer).opt().min(0.0).default("0"),
                ],
            ],
        ),
        ep(
            "POST",
            "/nodes/{node}/qemu/{vmid}/agent/file-write",
            &[
                VM_PATH,
                &[
                    p("content", Str).max_len(61_440),
                    p("encode", Boolean).opt().default("1"),
                    p("file", Str),
                ],
            ],
        ),
    ]
}

/// Storage on a node: status, content, upload, download.
fn storage_endpoints() -> Vec<EndpointRules> {
    vec![
        ep(
            "GET",
            "/nodes/{node}/storage",
            &[&[
                NODE,
                p("content", Str).opt().fmt("pve-storage-content-list"),
                p("enabled", Boolean).opt().default("0"),
                p("format", Boolean).opt().default("0"),
                STORAGE.opt(),
                p("target", Str).opt().fmt("pve-node"),
            ]],
        ),
        ep("GET", "/nodes/{node}/storage/{storage}", &[STORAGE_ON_NODE]),
        ep(
            "GET",
            "/nodes/{node}/storage/{storage}/status",
            &[STORAGE_ON_NODE],
        ),
        ep(
            "GET",
            "/nodes/{node}/storage/{storage}/content",
            &[
                STORAGE_ON_NODE,
                &[p("content", Str).opt().fmt("pve-storage-content"), VMID_OPT],
            ],
        ),
        ep(
            "POST",
            "/nodes/{node}/storage/{storage}/content",
            &[
                STORAGE_ON_NODE,
                &[
                    p("filename", Str),
                    p("format", Str)
                        .opt()
                        .one_of(&["raw", "qcow2", "subvol", "vmdk"])
                        .requires("size"),
                    p("size", Str).pattern("\\d+[MG]?"),
                    VMID,
                ],
            ],
        ),
        ep(
            "GET",
            "/nodes/{node}/storage/{storage}/content/{volume}",
            &[VOLUME_ON_NODE],
        ),
        ep(
            "PUT",
            "/nodes/{node}/storage/{storage}/content/{volume}",
            &[
                VOLUME_ON_NODE,
                &[p("notes", Str).opt(), p("protected", Boolean).opt()],
            ],
        ),
        ep(
            "DELETE",
            "/nodes/{node}/storage/{storage}/content/{volume}",
            &[
                VOLUME_ON_NODE,
                &[p("delay", Integer).opt().min(1.0).max(30.0)],
            ],
        ),
        ep(
            "POST",
            "/nodes/{node}/storage/{storage}/upload",
            &[
                STORAGE_ON_NODE,
                &[
                    p("checksum", Str).opt().requires("checksum-algorithm"),
                    p("checksum-algorithm", Str)
                        .opt()
                        .one_of(CHECKSUM_ALGORITHMS)
                        .requires("checksum"),
                    p("content", Str)
                        .fmt("pve-storage-content")
                        .one_of(UPLOAD_CONTENT),
                    p("filename", Str).max_len(255),
                    p("tmpfilename", Str)
                        .opt()
                        .pattern("/var/tmp/pveupload-[0-9a-f]+"),
                ],
            ],
        ),
        ep(
            "POST",
            "/nodes/{node}/storage/{storage}/download-url",
            &[
                STORAGE_ON_NODE,
                &[
                    p("checksum", Str).opt().requires("checksum-algorithm"),
                    p("checksum-algorithm", Str)
                        .opt()
                        .one_of(CHECKSUM_ALGORITHMS)
                        .requires("checksum"),
                    // The schema declares `enum: null` here (the list is built at run time).
                    p("compression", Str).opt(),
                    p("content", Str)
                        .fmt("pve-storage-content")
                        .one_of(UPLOAD_CONTENT),
                    p("filename", Str).max_len(255),
                    p("url", Str).pattern("https?://.*"),
                    p("verify-certificates", Boolean).opt().default("1"),
                ],
            ],
        ),
    ]
}

/// Tasks of a node.
fn task_endpoints() -> Vec<EndpointRules> {
    vec![
        ep(
            "GET",
            "/nodes/{node}/tasks",
            &[&[
                NODE,
                p("errors", Boolean).opt().default("0"),
                p("limit", Integer).opt().min(0.0).default("50"),
                p("since", Integer).opt(),
                p("source", Str)
                    .opt()
                    .one_of(&["archive", "active", "all"])
                    .default("archive"),
                p("start", Integer).opt().min(0.0).default("0"),
                p("statusfilter", Str)
                    .opt()
                    .fmt("pve-task-status-type-list"),
                p("typefilter", Str).opt(),
                p("until", Integer).opt(),
                p("userfilter", Str).opt(),
                VMID_OPT,
            ]],
        ),
        ep("GET", "/nodes/{node}/tasks/{upid}", &[TASK_PATH]),
        ep("DELETE", "/nodes/{node}/tasks/{upid}", &[TASK_PATH]),
        ep("GET", "/nodes/{node}/tasks/{upid}/status", &[TASK_PATH]),
        ep(
            "GET",
            "/nodes/{node}/tasks/{upid}/log",
            &[
                TASK_PATH,
                &[
                    p("download", Boolean).opt(),
                    p("limit", Integer).opt().min(0.0).default("50"),
                    p("start", Integer).opt().min(0.0).default("0"),
                ],
            ],
        ),
    ]
}

/// Migration (qemu-server `API2/Qemu.pm` `migrate_vm_precondition`, `migrate_vm`).
fn migrate_endpoints() -> Vec<EndpointRules> {
    vec![
        ep(
            "GET",
            "/nodes/{node}/qemu/{vmid}/migrate",
            &[VM_PATH, &[p("target", Str).opt().fmt("pve-node")]],
        ),
        ep(
            "POST",
            "/nodes/{node}/qemu/{vmid}/migrate",
            &[
                VM_PATH,
                &[
                    p("bwlimit", Integer).opt().min(0.0),
                    p("force", Boolean).opt(),
                    p("migration_network", Str).opt().fmt("CIDR"),
                    p("migration_type", Str)
                        .opt()
                        .one_of(&["secure", "insecure"]),
                    p("online", Boolean).opt(),
                    p("target", Str).fmt("pve-node"),
                    p("targetstorage", Str).opt().fmt("storage-pair-list"),
                    p("with-conntrack-state", Boolean).opt().default("0"),
                    p("with-local-disks", Boolean).opt(),
                ],
            ],
        ),
    ]
}

/// Permissions, pools and the cluster storage configuration.
fn access_pool_and_storage_endpoints() -> Vec<EndpointRules> {
    vec![
        ep(
            "GET",
            "/access/permissions",
            &[&[
                p("path", Str).opt(),
                p("userid", Str).opt().pattern(concat!(
                    "(?^:^(?^:[^\\s:/]+)\\@(?^:[A-Za-z][A-Za-z0-9\\.\\-_]+)",
                    "(?:!(?^:[A-Za-z][A-Za-z0-9\\.\\-_]+))?$)",
                )),
            ]],
        ),
        ep(
            "GET",
            "/pools",
            &[&[
                POOLID.opt(),
                p("type", Str)
                    .opt()
                    .one_of(&["qemu", "lxc", "storage"])
                    .requires("poolid"),
            ]],
        ),
        ep("POST", "/pools", &[&[p("comment", Str).opt(), POOLID]]),
        ep(
            "PUT",
            "/pools",
            &[&[
                p("allow-move", Boolean).opt().default("0"),
                p("comment", Str).opt(),
                p("delete", Boolean).opt().default("0"),
                POOLID,
                p("storage", Str).opt().fmt("pve-storage-id-list"),
                p("vms", Str).opt().fmt("pve-vmid-list"),
            ]],
        ),
        ep("DELETE", "/pools", &[&[POOLID]]),
        ep(
            "GET",
            "/pools/{poolid}",
            &[&[
                POOLID,
                p("type", Str).opt().one_of(&["qemu", "lxc", "storage"]),
            ]],
        ),
        ep(
            "GET",
            "/storage",
            &[&[p("type", Str).opt().one_of(&[
                "btrfs",
                "cephfs",
                "cifs",
                "dir",
                "esxi",
                "iscsi",
                "iscsidirect",
                "lvm",
                "lvmthin",
                "nfs",
                "pbs",
                "rbd",
                "zfs",
                "zfspool",
            ])]],
        ),
        ep("GET", "/storage/{storage}", &[&[STORAGE]]),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::perl_regex::compiled;
    use super::super::{Format, ParamRule, property_format};
    use super::*;

    fn visit(rules: &[ParamRule], seen: &mut Vec<&'static str>) {
        for rule in rules {
            if let Some(pattern) = rule.pattern {
                seen.push(pattern);
            }
            match rule.format {
                Some(Format::Keys(keys)) => visit(keys, seen),
                Some(Format::Named(name)) => {
                    if let Some(keys) = property_format(name) {
                        visit(keys, seen);
                    }
                }
                None => {}
            }
        }
    }

    #[test]
    fn every_rule_pattern_compiles() {
        let mut patterns = Vec::new();
        for endpoint in all() {
            visit(&endpoint.params, &mut patterns);
        }
        assert!(patterns.len() > 10);
        for pattern in patterns {
            assert!(
                compiled(pattern).is_some(),
                "pattern does not compile: {pattern}"
            );
        }
    }

    #[test]
    fn every_endpoint_is_unique_and_lists_its_path_params() {
        let endpoints = all();
        // The 58 of the schema subset, then the agent's file-read and file-write (2),
        // migration (2) and HA (10 for resources and status, 5 for rules, 5 for groups).
        assert_eq!(endpoints.len(), 82);
        for (i, e) in endpoints.iter().enumerate() {
            assert!(
                !endpoints[..i]
                    .iter()
                    .any(|o| o.method == e.method && o.template == e.template),
                "duplicate {} {}",
                e.method,
                e.template
            );
            for segment in e.template.split('/') {
                if let Some(name) = segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                    assert!(
                        e.param(name).is_some(),
                        "{} {} lacks {name}",
                        e.method,
                        e.template
                    );
                }
            }
        }
    }
}
