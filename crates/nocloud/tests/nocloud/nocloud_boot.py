"""Run cloud-init's own first-boot data path on a seed directory, confined
to a scratch directory, and print what it concluded as JSON.

Usage: nocloud_boot.py WORK_DIR SEED_DIR

This is cloud-init's `init` stage minus mounting and running modules: the
NoCloud datasource reads SEED_DIR (the files extracted from our ISO), then
user-data and vendor-data go through cloud-init's part handlers and its
config merger, exactly as on a booting VM. Every path cloud-init writes to
is under WORK_DIR (the CLOUD_CFG environment config overrides them), and
no module, boothook or script is executed.
"""

import json
import os
import shutil
import sys

work, seed = sys.argv[1], sys.argv[2]
cfg_path = os.path.join(work, "cloud.cfg")
with open(cfg_path, "w") as f:
    json.dump(
        {
            "system_info": {
                "paths": {
                    "cloud_dir": os.path.join(work, "cloud"),
                    "run_dir": os.path.join(work, "run"),
                }
            },
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

from cloudinit import sources, stages  # noqa: E402
from cloudinit.settings import PER_INSTANCE  # noqa: E402

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

hostname = ds.get_hostname()
hostname = getattr(hostname, "hostname", hostname)


def listing(name):
    path = init.paths.get_ipath_cur(name)
    if not os.path.isdir(path):
        return []
    return sorted(e for e in os.listdir(path) if os.path.isfile(os.path.join(path, e)))


print(
    json.dumps(
        {
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
        },
        default=str,
    )
)
