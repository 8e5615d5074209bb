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
    for spec in _specs(specs).values():
        gpu = (f"CUDA {spec.cuda.version} {','.join(spec.cuda.gpu_archs)}" if spec.cuda
               else f"ROCm {spec.rocm.version} {','.join(spec.rocm.gpu_archs)}" if spec.rocm else "CPU")
        frameworks = ", ".join(f"{p} {v}" for e in spec.environments.values() for p, v in e.packages.items()
                               if p not in ("numpy", "mpi4py"))
        typer.echo(f"{spec.name:<14} {spec.cpu_target:<15} {gpu:<22} {spec.mpi.flavour} {spec.mpi.version} "
                   f"({spec.mpi.fabric})  {frameworks}")


@images_app.command("render")
def images_render(
    names: List[str] = typer.Argument(None, help="images to render (default: all)"),
    out: Path = typer.Option(None, "-o", "--out", help="folder to write NAME.def and NAME.Dockerfile (default: "
                             "containers/ of the checkout you are in, else hpcdl's own)"),
    check: bool = typer.Option(False, "--check", help="write nothing; exit 1 if a checked-in file differs"),
    specs: Optional[Path] = SPECS,
) -> None:
    """Render the Singularity definition and Dockerfile of each image (what `make containers` runs)."""
    from hpcdl.images.generate import CONTAINERS, output_paths, render

    stale = []
    rendered = {}
    folder = out or _working_checkout() or CONTAINERS
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
        typer.echo("out of date (run make containers): " + " ".join(map(str, stale)), err=True)
        raise typer.Exit(1)


@images_app.command("compat")
def images_compat(
    names: List[str] = typer.Argument(None, help="images (default: all)"),
    site: Optional[str] = typer.Option(None, "--site", "-s",
                                        help="also check the image's MPI against this site's launcher"),
    specs: Optional[Path] = SPECS,
) -> None:
    """Refuse specs that cannot work (CUDA vs GPU, framework pins, MPI vs the site's launcher)."""
    from hpcdl.images.compat import image_problems, site_problems
    from hpcdl.sites import load_site

    the_site = load_site(site) if site else None
    problems = []
    for spec in _pick(_specs(specs), names or []):
        found = image_problems(spec) + (site_problems(spec, the_site) if the_site else [])
        problems += [f"{spec.name}: {p}" for p in found]
        if not found:
            typer.echo(f"{spec.name}: ok" + (f" on {the_site.name}" if the_site else ""))
    if problems:
        raise HpcdlError("; ".join(problems))


@images_app.command("check", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def images_check(ctx: typer.Context) -> None:
    """Run the image check here (what %test runs): hpcdl images check [--image NAME --mode image]."""
    from hpcdl.images.check import main as check_main

    raise typer.Exit(check_main(list(ctx.args)))


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
