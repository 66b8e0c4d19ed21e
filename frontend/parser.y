%{
/* placeholder: replaced by the real grammar */
%}
%%
program: %empty ;
%%
