"""Staging at scale: each node copies only its shard, shuffles it each epoch, and a DataWarp
site's script asks Slurm for the burst buffer it stages to."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from conftest import RECIPES, shellcheck
from PIL import Image

from hpcdl.errors import HpcdlError
from hpcdl.executors.staging import node_index, parse_shard, shard_files, stage
from hpcdl.plan import JobRequest, make_plan
from hpcdl.render import JobOptions, render_job_script
from hpcdl.sites import load_site
from hpcdl.train.data import Batches, Split, node_seed
from hpcdl.train.recipe import load_recipe


def image_folder(root, per_class=(5, 4, 1)):
    for c, n in enumerate(per_class):
        for i in range(n):
            folder = root / "train" / f"class{c}"
            folder.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (8, 8), (40 * c, 10 * i, 0)).save(folder / f"{i}.jpg")
    (root / "val" / "class0").mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(root / "val" / "class0" / "v.jpg")
    return root


def test_the_nodes_shards_split_each_class_cover_the_set_once_and_each_gets_the_whole_held_out_set(tmp_path):
    src = image_folder(tmp_path / "imagenet")
    shards = [shard_files(src, node, 2) for node in range(2)]
    train = [sorted(f for f in s if f.startswith("train/")) for s in shards]
    assert sorted(train[0] + train[1]) == sorted(str(p.relative_to(src)) for p in (src / "train").rglob("*.jpg"))
    assert not set(train[0]) & set(train[1])
    assert {f.split("/")[1] for f in train[0]} == {"class0", "class1", "class2"}  # every class on node 0
    assert all("val/class0/v.jpg" in s for s in shards)


def test_a_node_stages_only_its_shard_checks_it_and_keeps_every_class_folder(tmp_path):
    src = image_folder(tmp_path / "imagenet")
    copy = stage(src, tmp_path / "node1", shard=(1, 2))
    staged = sorted(str(p.relative_to(copy)) for p in copy.rglob("*.jpg"))
    assert staged == sorted(shard_files(src, 1, 2))
    assert (copy / "train" / "class2").is_dir()  # class2's one image went to node 0, the folder did not
    assert stage(src, tmp_path / "node1", shard=(1, 2)) == copy  # a requeued job reuses a complete shard


def test_tar_shards_are_dealt_to_the_nodes_whole(tmp_path):
    for i in range(5):
        (tmp_path / f"shard-{i:04d}.tar").write_bytes(b"")
    assert shard_files(tmp_path, 1, 2) == ["shard-0001.tar", "shard-0003.tar"]
    with pytest.raises(HpcdlError, match="fewer than the 8 nodes"):
        shard_files(tmp_path, 6, 8)


def test_the_node_index_comes_from_the_per_node_launcher_or_the_jobs_host_list(tmp_path):
    assert node_index({"SLURM_NODEID": "3"}) == 3
    hostfile = tmp_path / "hosts"
    hostfile.write_text("batch1\nh41n01\nh41n01\nh41n02\nh41n02\n")  # LSF: the launch node, then a line per slot
    assert node_index({"LSB_DJOB_HOSTFILE": str(hostfile)}, hostname="h41n02.summit.olcf.ornl.gov") == 2
    assert parse_shard("auto/4", {"SLURM_NODEID": "1"}) == (1, 4)
    with pytest.raises(HpcdlError, match="NODE/NODES"):
        parse_shard("1of4")


def test_the_stage_command_line_takes_a_shard(tmp_path):
    src = image_folder(tmp_path / "imagenet")
    proc = subprocess.run([sys.executable, "-m", "hpcdl", "stage", "--shard", "0/2", str(src), str(tmp_path / "n0")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "shard 0 of 2" in proc.stdout


def test_a_node_shuffle_reorders_only_the_nodes_own_shard_each_epoch():
    split = Split(np.zeros(40, dtype=np.int64), np.arange(40, dtype=np.float32).reshape(40, 1, 1, 1))
    node0 = [Batches(split, 4, node_seed(1, 0), local, 2, samples=36) for local in range(2)]
    assert node0[0].per_epoch == 4  # the smallest node's 36 images set the epoch on every node
    epoch0 = {float(v) for b in node0 for k in range(4) for v in b.get(k)[0].ravel()}
    epoch1 = [float(v) for b in node0 for k in range(4, 8) for v in b.get(k)[0].ravel()]
    assert len(epoch0) == 32 and len(set(epoch1)) == 32
    assert node_seed(1, 0) != node_seed(1, 1)


def render(site_name, recipe, nodes=2, image=None):
    site = load_site(site_name)
    plan = make_plan(site, JobRequest(nodes=nodes, image=image))
    return render_job_script(site, plan, recipe, JobOptions(name="resnet"))


def staged_recipe(**data):
    recipe = load_recipe(RECIPES / "digits-quick.yaml").model_dump(mode="json")
    recipe["data"].update(stage=True, path="/global/cscratch1/sd/u/imagenet", source="imagefolder", **data)
    return recipe


def test_cori_asks_datawarp_for_a_private_burst_buffer_and_each_node_stages_its_shard(tmp_path):
    # CosmoFlow's own Shifter image: no hpcdl image runs on Cori's KNL under Cray MPICH
    text = render("cori-knl", staged_recipe(shuffle="node"), nodes=4, image="docker:sfarrell/cosmoflow-cpu-mpich:latest")
    assert "#DW jobdw capacity=200GB access_mode=private type=scratch" in text.splitlines()
    assert text.index("#DW jobdw") < text.index("\nHPCDL_JOB_ID=")  # a directive, before the first command
    assert 'HPCDL_STAGE_DIR="${DW_JOB_PRIVATE}"/hpcdl-data-"$HPCDL_JOB_ID"' in text
    assert ("srun --nodes=4 --ntasks=4 --ntasks-per-node=1 hpcdl stage --shard auto/4 "
            '/global/cscratch1/sd/u/imagenet "$HPCDL_STAGE_DIR"') in text
    path = tmp_path / "job.sh"
    path.write_text(text)
    shellcheck(path)


def test_a_site_without_a_burst_buffer_asks_for_none_and_a_global_shuffle_copies_the_whole_set():
    text = render("summit", staged_recipe())
    assert "#DW" not in text and "--shard" not in text


def test_under_a_node_shuffle_a_rank_reads_its_nodes_shard_with_the_smallest_nodes_epoch():
    from hpcdl.train.backends.pytorch.steps import rank_batches
    from hpcdl.train.data import Dataset
    from hpcdl.train.ranks import RankInfo
    from hpcdl.train.recipe import recipe_from_dict

    class PeersWithAShardOf30:  # this rank's node holds 40 images, the other node 30
        def max(self, value):
            return max(value, -30.0) if value < 0 else value

    split = Split(np.zeros(40, dtype=np.int64), np.zeros((40, 1, 1, 1), dtype=np.float32))
    data = Dataset("shard", split, split, 10, (1, 1, 1))
    recipe = recipe_from_dict({"net": "cifar10_quick", "batch_size": 5, "base_lr": 0.1, "max_iter": 1,
                               "data": {"shuffle": "node"}}, "test")
    batches = rank_batches(recipe, data, RankInfo(3, 4, 1, "srun"), PeersWithAShardOf30(), nodes=2)
    assert (batches.rank, batches.world, batches.seed) == (1, 2, node_seed(1, 1))
    assert batches.per_epoch == 3  # 30 images over the node's 2 ranks in batches of 5
