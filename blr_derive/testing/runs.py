"""One run of ``equivalent``: a user's torch optimizer and the generated one over one problem, dtype and setting,
stepped together and compared after every step (blr_derive/testing/compare.py drives the runs)."""
from __future__ import annotations

import copy
import numpy as np
import torch

from blr_derive.testing.problems import agree, draw_seed

def _groups(params, problem, lr_name, setting):
    if not problem.groups or lr_name is None:
        return params
    return [{"params": params[:1]}, {"params": params[1:], lr_name: setting[lr_name] * 0.5}]


def _f64(x):
    return (x.detach().to(torch.float64).cpu().numpy() if isinstance(x, torch.Tensor)
            else np.asarray(float(x), dtype=np.float64))


def _agree(yours, derived, dtype, pre_yours=None, pre_derived=None) -> bool:
    """:func:`~blr_derive.testing.problems.agree` on torch values (a state kept in float32, such as torch's 0-d
    ``mu_product``, is compared at float32's tolerance)."""
    if any(isinstance(x, torch.Tensor) and x.dtype in (torch.float32, torch.float16, torch.bfloat16)
           for x in (yours, derived)):
        dtype = torch.float32
    key = "float64" if dtype == torch.float64 else "float32"
    return agree(_f64(yours), _f64(derived), key, None if pre_yours is None else _f64(pre_yours),
                 None if pre_derived is None else _f64(pre_derived))


def _clone_state(opt, params) -> list:
    return [{k: (v.detach().clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v))
             for k, v in opt.state[p].items()} for p in params]


class _NotExercised(Exception):
    """A problem or setting the user's optimizer cannot take part in (named in the report)."""


def _refuses(make):
    """The ValueError/TypeError ``make()`` raises (a constructor refusing a setting), or None."""
    try:
        make()
    except (ValueError, TypeError) as exc:
        return exc
    return None


def user_optimizer(factory, names, problem, setting, user_kwargs, params):
    """The user's optimizer over ``params`` for one problem and setting, with its own names for the learning rate
    (``names['lr']``) and hyperparameters (``user_kwargs``)."""
    user_lr = names.get("lr", "lr")
    lr_name = user_lr if "lr" in setting else None
    return factory(_groups(params, problem, lr_name, {user_lr: setting.get("lr")}), **user_kwargs)


class _Run:
    """One problem at one dtype and setting: both optimizers stepped together, compared after every step."""

    def __init__(self, derived, factory, names, problem, dtype, setting, user_kwargs, seed):
        self.d, self.factory, self.names = derived, factory, names
        self.problem, self.dtype, self.setting, self.user_kwargs = problem, dtype, setting, user_kwargs
        self.seed = seed
        self.data = problem.data(dtype, seed)
        self.pg, self.pu = problem.make_params(dtype, seed), problem.make_params(dtype, seed)
        self.lr_name = "lr" if "lr" in setting else None
        self.user_lr = self.names.get("lr", "lr")                    # what the user's param groups call it
        self.og, self.ou = self.generated(self.pg), self.user(self.pu)
        self.sg = self.su = None
        if problem.scheduler and self.lr_name is not None and self.user_lr != "lr":
            raise _NotExercised(f"problem '{problem.name}' (torch's schedulers set 'lr'; your optimizer calls it "
                                f"'{self.user_lr}')")
        if problem.scheduler and self.lr_name is not None:
            self.sg = torch.optim.lr_scheduler.StepLR(self.og, step_size=3, gamma=0.5)
            self.su = torch.optim.lr_scheduler.StepLR(self.ou, step_size=3, gamma=0.5)

    def generated(self, params):
        """The generated optimizer over ``params`` (the problem's param groups, the setting)."""
        return self.d.cls(_groups(params, self.problem, self.lr_name, self.setting), **self.setting)

    def user(self, params):
        """The user's optimizer over ``params`` (:func:`user_optimizer`)."""
        return user_optimizer(self.factory, self.names, self.problem, self.setting, self.user_kwargs, params)

    def reload(self):
        sd_g, sd_u = copy.deepcopy(self.og.state_dict()), copy.deepcopy(self.ou.state_dict())
        self.og, self.ou = self.generated(self.pg), self.user(self.pu)
        self.og.load_state_dict(sd_g)
        self.ou.load_state_dict(sd_u)

    def step(self, k):
        """Step both; None if they agree, else (parameter index, the user's variable name, yours, derived, context
        for localization)."""
        if self.problem.reload_at == k:
            self.reload()
        pre = {"params": [p.detach().clone() for p in self.pu], "user": _clone_state(self.ou, self.pu),
               "gen_params": [p.detach().clone() for p in self.pg],
               "gen": _clone_state(self.og, self.pg),
               "lrs": [g.get(self.user_lr) for g in self.ou.param_groups]}
        if self.d.sampled:
            # Monte Carlo recipes: the gradients at samples of q (the peer's sampled_params API), with the same
            # draws for both (torch's global generator, seeded per step)
            draws = int(self.setting.get("mc_samples", 1))
            for opt, params in ((self.og, self.pg), (self.ou, self.pu)):
                torch.manual_seed(draw_seed(self.seed, k))
                for _ in range(draws):
                    with opt.sampled_params(train=True):
                        self.problem.gradients(params, self.data, k)
                with torch.no_grad():
                    opt.step()
            grads = None
        else:
            self.problem.gradients(self.pg, self.data, k)
            self.problem.gradients(self.pu, self.data, k)
            grads = [None if p.grad is None else p.grad.detach().clone() for p in self.pu]
            with torch.no_grad():
                self.og.step()
                self.ou.step()
        if self.sg is not None:
            self.sg.step()
            self.su.step()
        if self.dtype == torch.float64 and any(isinstance(v, torch.Tensor) and v.dtype == torch.float32
                                               and key != "step" for p in self.pu for key, v in self.ou.state[p].items()):
            self.dtype = torch.float32  # your float64 update reads float32 state (torch's NAdam mu_product): from
            #                             here on (its rounding stays in the state, e.g. after a reload) f32 tolerance
        dtype = self.dtype
        for i, (a, b) in enumerate(zip(self.pg, self.pu)):
            if not _agree(b, a, dtype, pre["params"][i], pre["gen_params"][i]):
                return i, "parameter", b, a, pre, grads
            sg, su = self.og.state[a], self.ou.state[b]
            for key in sorted(sg, key=str):
                ukey = self.names.get(key, key)
                if ukey not in su:
                    continue
                before_u, before_g = pre["user"][i].get(ukey), pre["gen"][i].get(key)
                both = before_u is not None and before_g is not None
                if not _agree(su[ukey], sg[key], dtype, before_u if both else None, before_g if both else None):
                    return i, ukey, su[ukey], sg[key], pre, grads
        return None

    def localize(self, pre, grads):
        """Evaluate the derived step on the user's state before the diverging step: the first derived assignment
        (state or parameter) whose value differs from the user's after it, or None (also for sampled recipes,
        whose gradients depend on the draws inside the step)."""
        if grads is None:
            return None
        params = [p.clone().requires_grad_(True) for p in pre["params"]]
        opt = self.generated(params)
        for g, lr in zip(opt.param_groups, pre["lrs"]):
            if self.lr_name is not None and lr is not None:
                g[self.lr_name] = lr
        inverse = {self.names.get(k, k): k for k in set(self.d.stored) | {"step"} | set(self.d.renamed.values())}
        for p, gen_state, user_state in zip(params, pre["gen"], pre["user"]):
            state = dict(gen_state)
            for ukey, v in user_state.items():
                key = inverse.get(ukey, ukey)
                if key in state or not state:
                    state[key] = v.clone() if isinstance(v, torch.Tensor) else v
            if state:
                opt.state[p] = state
        for p, g in zip(params, grads):
            p.grad = g
        with torch.no_grad():
            opt.step()
        for name, text in self.d.assignments:
            key = self.d.renamed.get(name, name)
            for i, (a, b) in enumerate(zip(params, self.pu)):
                if name == self.d.mean:
                    if not _agree(b, a, self.dtype, pre["params"][i], pre["params"][i]):
                        return name, i, b, a
                    continue
                ukey = self.names.get(key, key)
                if key not in opt.state[a] or ukey not in self.ou.state[b]:
                    continue
                before = pre["user"][i].get(ukey)
                if not _agree(self.ou.state[b][ukey], opt.state[a][key], self.dtype, before, before):
                    return name, i, self.ou.state[b][ukey], opt.state[a][key]
        return None
