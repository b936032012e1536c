"""Run cloud-init's own first-boot data path on a seed directory, confined
to a scratch directory, and print what it concluded as JSON.

Usage: nocloud_boot.py WORK_DIR SEED_DIR

This is cloud-init's `init` stage minus mounting and running modules: the
NoCloud datasource reads SEED_DIR (the files extracted from our ISO), then
user-data and vendor-data go through cloud-init's part handlers and its
config merger, exactly as on a booting VM. Every path cloud-init writes to
is under WORK_DIR (the CLOUD_CFG environment config overrides them), and
no module, boothook or script is executed.

Then the seed is taken away (as when the provider detaches it) and the
`init --local` of a later boot runs on the same WORK_DIR: `main_init`'s
choice between trusting and checking the cache (cloudinit/cmd/main.py),
then `Init.fetch`; its result is under "later_boot".
"""

import json
import os
import shutil
import sys

work, seed = sys.argv[1], sys.argv[2]
cfg_path = os.path.join(work, "cloud.cfg")
sandbox_paths = {
    "cloud_dir": os.path.join(work, "cloud"),
    "run_dir": os.path.join(work, "run"),
}
with open(cfg_path, "w") as f:
    json.dump(
        {
            "system_info": {"paths": sandbox_paths},
            "def_log_file": os.path.join(work, "cloud-init.log"),
            "syslog_fix_perms": None,
            "datasource_list": ["NoCloud"],
            # No device search: the seed directory is the source.
            "datasource": {"NoCloud": {"fs_label": None}},
        },
        f,
    )
os.environ["CLOUD_CFG"] = cfg_path
shutil.copytree(seed, os.path.join(work, "cloud", "seed", "nocloud"))

from cloudinit import helpers, sources, stages  # noqa: E402
from cloudinit.settings import PER_INSTANCE  # noqa: E402

# Some readers build Paths({}) and so use the built-in /var/lib/cloud and
# /run/cloud-init (Init._read_cfg before cloud-init 24.2 reads the instance's
# stored cloud-config there). On a guest those are the real directories; here
# the built-in defaults are the scratch ones, so every reader agrees.
_paths_init = helpers.Paths.__init__


def _sandboxed_paths_init(self, path_cfgs, ds=None):
    _paths_init(self, {**sandbox_paths, **path_cfgs}, ds)


helpers.Paths.__init__ = _sandboxed_paths_init

try:
    from cloudinit.config.modules import Modules
except ImportError:  # cloud-init before 22.2
    from cloudinit.stages import Modules

init = stages.Init(ds_deps=[sources.DEP_FILESYSTEM])
init.read_cfg()
init.initialize()
ds = init.fetch(existing="trust")
init.instancify()
init.update()
init.consume_data(PER_INSTANCE)
cfg = Modules(init).cfg
# main_init's last step of the init stage; with manual_cache_clean in the
# merged config it writes the marker ds-identify looks for.
init.activate_datasource()
marker = init.paths.get_ipath_cur("manual_clean_marker")

hostname = ds.get_hostname()
hostname = getattr(hostname, "hostname", hostname)


def listing(name):
    path = init.paths.get_ipath_cur(name)
    if not os.path.isdir(path):
        return []
    return sorted(e for e in os.listdir(path) if os.path.isfile(os.path.join(path, e)))


def later_boot():
    """init --local of the next boot, without the seed."""
    shutil.rmtree(os.path.join(work, "cloud", "seed", "nocloud"))
    # A reboot empties /run, and with it the instance id of the boot before.
    shutil.rmtree(os.path.join(work, "run"))
    later = stages.Init(ds_deps=[sources.DEP_FILESYSTEM])
    later.read_cfg()
    # As main_init decides it for init --local.
    existing = "check"
    if later.cfg.get("manual_cache_clean", False):
        existing = "trust"
    elif os.path.exists(later.paths.get_ipath_cur("manual_clean_marker")):
        existing = "trust"
    later.purge_cache()
    result = {"existing": existing}
    try:
        later_ds = later.fetch(existing=existing)
    except sources.DataSourceNotFoundException:
        result["datasource"] = None
        return result
    result.update(
        {
            "datasource": type(later_ds).__name__,
            "restored_from_cache": later.ds_restored,
            "new_instance": later.is_new_instance(),
            "instance_id": later_ds.get_instance_id(),
            "network_config": later_ds.network_config,
        }
    )
    return result


first_boot = {
    "datasource": type(ds).__name__,
    "instance_id": ds.get_instance_id(),
    "hostname": hostname,
    "network_config": ds.network_config,
    "packages": cfg.get("packages"),
    "runcmd": cfg.get("runcmd"),
    "write_files": cfg.get("write_files"),
    "user_scripts": listing("scripts"),
    "vendor_scripts": listing("vendor_scripts"),
    "vendor_script_text": "".join(
        open(os.path.join(init.paths.get_ipath_cur("vendor_scripts"), name)).read()
        for name in listing("vendor_scripts")
    ),
    "manual_cache_clean": cfg.get("manual_cache_clean"),
    "manual_clean_marker": os.path.exists(marker),
}
first_boot["later_boot"] = later_boot()
print(json.dumps(first_boot, default=str))
