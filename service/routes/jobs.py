"""The runs this server started, as resources: GET /jobs, GET /jobs/{id}, its log, DELETE."""

from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import PlainTextResponse

from weightsearch.service.deps import Jobs, authorized
from weightsearch.service.jobs import Job, JobTable
from weightsearch.service.models import JobInfo, JobList, errors

router = APIRouter()


def _find(jobs: JobTable, job_id: int) -> Job:
    job = jobs.get(job_id)
    if job is None:
        raise HTTPException(404, f"no job {job_id}; GET /jobs lists them")
    return job


# A job's log names its study's data and settings: reading jobs takes the token as writing does.
@router.get("/jobs", response_model=JobList, dependencies=[Depends(authorized)],
            responses=errors(401, 403))
def list_jobs(jobs: Jobs) -> dict:
    return {"jobs": [j.to_dict() for j in jobs.all()]}


@router.get("/jobs/{job_id}", response_model=JobInfo, dependencies=[Depends(authorized)],
            responses=errors(401, 403, 404, 422))
def get_job(job_id: int, jobs: Jobs) -> dict:
    return _find(jobs, job_id).to_dict()


@router.get("/jobs/{job_id}/log", response_class=PlainTextResponse,
            dependencies=[Depends(authorized)], responses=errors(401, 403, 404, 422))
def job_log(job_id: int, jobs: Jobs) -> str:
    """The last 64 KiB of the job's log."""
    return _find(jobs, job_id).tail()


@router.delete("/jobs/{job_id}", response_model=JobInfo, dependencies=[Depends(authorized)],
               responses=errors(401, 403, 404, 422))
def cancel_job(job_id: int, jobs: Jobs) -> dict:
    """Stops the job: SIGTERM to its process group, SIGKILL if it still runs after a grace
    period (state `cancelling` meanwhile); a finished job is left as it is."""
    job = _find(jobs, job_id)
    jobs.cancel(job)
    return job.to_dict()
