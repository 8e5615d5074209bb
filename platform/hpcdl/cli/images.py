"""hpcdl images: list, render, check and compat for the container images in containers/images.yaml."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from hpcdl.cli import app
from hpcdl.errors import HpcdlError
from hpcdl.files import write_atomically

images_app = typer.Typer(help="Container images: list the specs, render definitions, check compatibility.",
                         no_args_is_help=True)
app.add_typer(images_app, name="images")

SPECS = typer.Option(None, "--specs", help="image specs file (default: containers/images.yaml of the checkout "
                     "you are in, else hpcdl's own)")


def _working_checkout() -> Optional[Path]:
    """containers/ of the checkout in the current folder: where `make containers` renders, whatever
    hpcdl install runs it (an editable install may point at another checkout)."""
    here = Path("containers")
    return here if (here / "images.yaml").is_file() else None


def _specs(path: Optional[Path]):
    from hpcdl.images.spec import IMAGES_YAML, load_images

    here = _working_checkout()
    return load_images(path or (here / "images.yaml" if here else IMAGES_YAML))


def _pick(specs, names: List[str]):
    unknown = [n for n in names if n not in specs]
    if unknown:
        raise HpcdlError(f"unknown image {unknown[0]!r}; known: {', '.join(sorted(specs))}")
    return [specs[n] for n in (names or sorted(specs))]


@images_app.command("list")
def images_list(specs: Optional[Path] = SPECS,
                as_json: bool = typer.Option(False, "--json", help="machine-readable list")) -> None:
    """One line per image: CPU target, CUDA and GPUs, MPI and fabric, frameworks."""
    if as_json:
        import json

        rows = [{"name": s.name, "cpu_target": s.cpu_target,
                 "cuda": {"version": s.cuda.version, "gpu_archs": list(s.cuda.gpu_archs)} if s.cuda else None,
                 "rocm": {"version": s.rocm.version, "gpu_archs": list(s.rocm.gpu_archs)} if s.rocm else None,
                 "net_plugin": s.net_plugin_library,
                 "mpi": {"flavour": s.mpi.flavour, "version": s.mpi.version, "fabric": s.mpi.fabric},
                 "environments": {n: dict(e.packages) for n, e in s.environments.items()}}
                for s in _specs(specs).values()]
        typer.echo(json.dumps(rows, indent=2))
        return
    rows = []
    for spec in _specs(specs).values():
        gpu = (f"CUDA {spec.cuda.version} {','.join(spec.cuda.gpu_archs)}" if spec.cuda
               else f"ROCm {spec.rocm.version} {','.join(spec.rocm.gpu_archs)}" if spec.rocm else "CPU")
        frameworks = ", ".join(f"{p} {v}" for e in spec.environments.values() for p, v in e.packages.items()
                               if p not in ("numpy", "mpi4py"))
        rows.append((spec.name, spec.arch, spec.cpu_target, gpu,
                     f"{spec.mpi.flavour} {spec.mpi.version} ({spec.mpi.fabric})", frameworks))
    # each column as wide as its widest cell, so the columns line up whatever the names
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)] if rows else []
    for row in rows:
        typer.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])


def _generate():
    """hpcdl.images.generate, or one line saying what to install: rendering needs hpccm, which a
    plain `pip install hpcdl` leaves out (it is the `containers` extra)."""
    try:
        from hpcdl.images import generate
    except ModuleNotFoundError as exc:
        if exc.name in ("hpccm", "spython", "packaging"):
            raise HpcdlError(f"rendering container definitions needs {exc.name}, which this install lacks: "
                             "pip install 'hpcdl[containers]'") from None
        raise
    return generate


def _out_folder(out: Optional[Path], verb: str) -> Path:
    """-o, else containers/ of the checkout in the working folder; outside a checkout -o is
    required (the folder beside the installed package is no place to write or compare)."""
    folder = out or _working_checkout()
    if folder is None:
        raise HpcdlError(f"images {verb}: give the folder with -o/--out (there is no containers/images.yaml "
                         "in the working folder)")
    return folder


@images_app.command("render")
def images_render(
    names: List[str] = typer.Argument(None, help="images to render (default: all)"),
    out: Path = typer.Option(None, "-o", "--out", help="folder to write NAME.def and NAME.Dockerfile (default: "
                             "containers/ of the checkout in the working folder; elsewhere required)"),
    check: bool = typer.Option(False, "--check", help="write nothing; exit 1 if a checked-in file differs"),
    specs: Optional[Path] = SPECS,
) -> None:
    """Render the Singularity definition and Dockerfile of each image (what `make containers` runs).

    Needs hpccm: pip install 'hpcdl[containers]'.
    """
    generate = _generate()
    output_paths, render = generate.output_paths, generate.render

    stale = []
    rendered = {}
    folder = _out_folder(out, "render --check" if check else "render")
    for spec in _pick(_specs(specs), names or []):  # render everything before writing anything
        for fmt, path in output_paths(spec.name, folder).items():
            rendered[path] = render(spec, fmt)
    for path, text in rendered.items():
        same = path.is_file() and path.read_text() == text
        if check:
            if not same:
                stale.append(path)
            continue
        if same:  # untouched: its time stamp and mode stay what they were
            typer.echo(f"unchanged {path}")
            continue
        # a rewritten file keeps the mode it had (checked-in files are 644; a new one is too)
        mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
        write_atomically(path, text, mode=mode)
        typer.echo(f"wrote {path}")
    if stale:
        how = "make containers" if out is None else f"hpcdl images render -o {folder}"
        typer.echo(f"out of date (run {how}): " + " ".join(map(str, stale)), err=True)
        raise typer.Exit(1)


@images_app.command("compat")
def images_compat(
    names: List[str] = typer.Argument(None, help="images (default: all)"),
    site: Optional[str] = typer.Option(None, "--site", "-s",
                                        help="also check the image against this site's node kind and launcher"),
    node_kind: Optional[str] = typer.Option(None, "--node-kind", "-k",
                                             help="the site's node kind (default: its default kind)"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable: image, site, node kind, reasons"),
    specs: Optional[Path] = SPECS,
) -> None:
    """Refuse specs that cannot work (CUDA vs GPU and driver, framework pins, MPI vs the site's
    launcher): one reason per line; exit 1 when any image is refused."""
    from hpcdl.images.compat import compat
    from hpcdl.sites import load_site

    if node_kind and not site:
        raise HpcdlError("images compat: --node-kind needs --site")
    the_site = load_site(site) if site else None
    kind = the_site.node_kind(node_kind)[0] if the_site else None
    rows = []
    for spec in _pick(_specs(specs), names or []):
        rows.append({"image": spec.name, "site": the_site.name if the_site else None, "node_kind": kind,
                     "reasons": compat(spec, the_site, kind)})
    if as_json:
        import json

        typer.echo(json.dumps([{**r, "ok": not r["reasons"]} for r in rows], indent=2))
    else:
        where = f" on {the_site.name} ({kind})" if the_site else ""
        for row in rows:
            if not row["reasons"]:
                typer.echo(f"{row['image']}: ok{where}")
            for reason in row["reasons"]:
                typer.echo(f"{row['image']}: {reason}", err=True)
    if any(r["reasons"] for r in rows):
        raise typer.Exit(1)


@images_app.command("check")
def images_check(
    image: Optional[str] = typer.Option(None, "--image", envvar="HPCDL_IMAGE",
                                        help="image spec name (default: $HPCDL_IMAGE, set inside hpcdl's images)"),
    images_yaml: Optional[Path] = typer.Option(None, "--images-yaml", envvar="HPCDL_IMAGES_YAML",
                                               help="image specs file (default: hpcdl's own)"),
    environment: str = typer.Option("main", "--environment", envvar="HPCDL_IMAGE_ENV",
                                    help="the image's Python environment to check"),
    mode: Optional[str] = typer.Option(None, "--mode", help="image: the pinned frameworks must be present "
                                       "(default when --image is given); host: check this environment"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable results"),
) -> None:
    """Run the image check here (what %test runs): frameworks, MPI, CUDA/ROCm and labels, one row each."""
    from hpcdl.images.check import main as check_main

    if mode not in (None, "image", "host"):
        raise HpcdlError(f"images check: --mode must be image or host, got {mode!r}")
    argv = ["--environment", environment]
    if image:
        argv += ["--image", image]
    if images_yaml:
        argv += ["--images-yaml", str(images_yaml)]
    if mode:
        argv += ["--mode", mode]
    if as_json:
        argv.append("--json")
    raise typer.Exit(check_main(argv, prog="hpcdl images check"))


@images_app.command("build")
def images_build(
    names: List[str] = typer.Argument(None, help="images to build (default: apptainer/singularity: all; "
                                      "Charliecloud: those whose base needs no registry)"),
    builder: str = typer.Option("auto", "--builder", help="auto, apptainer, singularity or charliecloud"),
    cache: Optional[Path] = typer.Option(None, "--cache", help="image cache (default: $HPCDL_IMAGE_CACHE or "
                                         "/var/cache/hpcdl/images)"),
    no_check: bool = typer.Option(False, "--no-check", help="skip the image check (%test) after the build"),
    sif: bool = typer.Option(False, "--sif", help="Charliecloud: also wrap the SquashFS image in a SIF file "
                             "(NAME-KEY.sif beside it, with siftool)"),
    specs: Optional[Path] = SPECS,
) -> None:
    """Build images with the best tool here (what `make images` runs); cached by a hash of the recipe and inputs."""
    _generate()  # one line naming hpcdl[containers] where hpccm is missing
    from hpcdl.images.build import build, pick_builder

    chosen = pick_builder(builder)
    all_specs = _specs(specs)
    if names:
        picked = _pick(all_specs, names)
    elif chosen == "charliecloud":
        picked = [s for s in all_specs.values() if s.bootstrap is not None]
        skipped = [s.name for s in all_specs.values() if s.bootstrap is None]
        if skipped:
            typer.echo(f"charliecloud here builds images whose base needs no registry; not building "
                       f"{', '.join(skipped)} (name them to try)", err=True)
    else:
        picked = list(all_specs.values())
    for spec in picked:
        built = build(spec, chosen, cache, log=lambda line: typer.echo(line, err=True), check=not no_check)
        typer.echo(built.path)
        if sif and built.path.endswith(".sqfs"):
            from hpcdl.images.build import write_sif

            target = Path(built.path).with_suffix(".sif")
            if not target.exists():
                write_sif(built.path, spec, target, log=lambda line: typer.echo(line, err=True))
            typer.echo(target)


@images_app.command("install")
def images_install(
    prefix: Path = typer.Argument(..., help="the prefix `hpcdl modulefiles render --prefix` was given: "
                                  "images go to PREFIX/images"),
    names: List[str] = typer.Argument(None, help="images to install (default: every image with a build in the cache)"),
    cache: Optional[Path] = typer.Option(None, "--cache", help="image cache (default: $HPCDL_IMAGE_CACHE or "
                                         "/var/cache/hpcdl/images)"),
    specs: Optional[Path] = SPECS,
) -> None:
    """Put the newest build of each image where the modules look: PREFIX/images/NAME.sif (.sqfs for
    Charliecloud), a link to NAME-VERSION-DIGEST.sif, switched atomically."""
    from hpcdl.images.build import cache_dir
    from hpcdl.images.install import install

    folder = Path(cache or cache_dir())
    all_specs = _specs(specs)
    picked = _pick(all_specs, names) if names else [
        s for s in all_specs.values() if any(folder.glob(f"{s.name}-*.json"))]
    if not picked:
        raise HpcdlError(f"images install: no image has a build in {folder}; run hpcdl images build first")
    for spec in picked:
        for done in install(spec, prefix, folder):
            state = "unchanged" if done.unchanged else "installed"
            typer.echo(f"{state} {done.path} ({done.digest}); {done.link} -> {done.path.name}")
